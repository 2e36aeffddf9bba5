"""Heartbeats answered before routing give exactly the route's answers, errors included,
and renew the lease as the route does."""

from __future__ import annotations

import httpx

from tests.service.conftest import StartServer
from tests.service.workers import SimWorker, joined

ARGS = ("--input", "kafka.orders:2", "--debounce-ms", "50", "--lease-ttl-ms", "60000",
        "--worker-token", "wt-0123456789abcdef")
AUTH = {"Authorization": "Bearer wt-0123456789abcdef"}


def test_heartbeats_renew_and_refusals_are_the_routes(start_server: StartServer) -> None:
    server = start_server(*ARGS)
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=10) as c:
        w1, _ = joined(c, "w1", "host-a")
        version = c.get("/status").json()["latestVersion"]
        r = w1.heartbeat({"Partition 0": 7})
        assert r.status_code == 200 and r.json() == {"jobModelVersion": version}
        assert r.headers["content-type"] == "application/json"
        assert c.get("/status").json()["lagPerTask"]["Partition 0"] == 7
        path, lease = "/processors/w1/heartbeat", SimWorker.lease_of("w1")
        # no worker token: the route's 401, before the body is looked at
        r = httpx.post(server.url + path, json={}, headers=lease)
        assert r.status_code == 401, r.text
        # no lease token
        r = c.post(path, json={})
        assert (r.status_code, r.json()["error"]) == (401, "lease_token_required")
        # another incarnation's token
        r = c.post(path, json={}, headers={"Coxswain-Lease-Token": "not-this-one"})
        assert (r.status_code, r.json()["error"]) == (409, "fenced")
        # unknown processor, malformed bodies
        r = c.post("/processors/nobody/heartbeat", json={}, headers=lease)
        assert (r.status_code, r.json()["error"]) == (404, "unknown_processor")
        r = c.post(path, content=b"", headers=lease)
        assert r.status_code == 422, r.text
        r = c.post(path, json={"taskLags": {"Partition 0": -1}}, headers=lease)
        assert r.status_code == 422, r.text
        r = c.post(path, json={"unknown": 1}, headers=lease)
        assert r.status_code == 422, r.text
        # the lease still renews, and the last good report stands
        assert w1.heartbeat().status_code == 200
        assert c.get("/status").json()["lagPerTask"]["Partition 0"] == 7
