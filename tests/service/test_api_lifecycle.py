"""Membership, job models, long polling, barriers, lease expiry, over real HTTP."""

from __future__ import annotations

import time

import httpx

from tests.service.conftest import StartServer
from tests.service.workers import SimWorker, ack_all, wait_for_members, wait_for_version

FAST = ("--input", "kafka.orders:4", "--debounce-ms", "50", "--lease-ttl-ms", "1500",
        "--heartbeat-interval-ms", "300", "--barrier-timeout-ms", "1500")


def test_health_and_readiness(start_server: StartServer) -> None:
    server = start_server(*FAST)
    with server.client() as c:
        assert c.get("/healthz").json() == {"status": "ok"}
        ready = c.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["leader"]
        assert c.get("/openapi.json").json()["info"]["title"] == "Coxswain"


def test_registration_conflict_and_leave(start_server: StartServer) -> None:
    server = start_server(*FAST)
    with server.client() as c:
        first = c.post("/processors", json={"processorId": "w1", "locationId": "host-a"})
        assert first.status_code == 201
        token = first.json().pop("leaseToken")
        assert len(token) >= 32
        assert {k: v for k, v in first.json().items() if k != "leaseToken"} == {
            "processorId": "w1", "leaseTtlMs": 1500, "heartbeatIntervalMs": 300,
            "jobModelVersion": None}
        again = c.post("/processors", json={"processorId": "w1", "locationId": "host-a"})
        assert again.status_code == 200
        assert again.json()["leaseToken"] != token  # a new incarnation, a new token
        moved = c.post("/processors", json={"processorId": "w1", "locationId": "host-b"})
        assert moved.status_code == 409
        assert moved.json()["error"] == "processor_conflict"
        generated = c.post("/processors", json={"locationId": "host-c"})
        assert generated.status_code == 201
        assert generated.json()["processorId"].startswith("processor-")
        listed = {p["processorId"]: p for p in c.get("/processors").json()}
        assert set(listed) == {"w1", generated.json()["processorId"]}
        assert listed["w1"]["locationId"] == "host-a"
        lease = {"Coxswain-Lease-Token": again.json()["leaseToken"]}
        assert c.delete("/processors/w1", headers=lease).status_code == 204
        gone = c.delete("/processors/w1", headers=lease)
        assert gone.status_code == 404
        assert gone.json()["error"] == "unknown_processor"


def test_job_model_etag_long_poll_and_barrier(start_server: StartServer) -> None:
    # both processors ack by hand, so neither's lease nor the barrier may run out
    # between the steps (with FAST's 1.5 s, a loaded machine's slow steps expired w2)
    server = start_server(*FAST, "--lease-ttl-ms", "60000", "--barrier-timeout-ms", "60000")
    with server.client() as c:
        assert c.get("/jobmodel").json()["error"] == "no_job_model"
        w1, w2 = SimWorker(c, "w1", "host-a"), SimWorker(c, "w2", "host-b")
        w1.register()
        w2.register()
        model = wait_for_members(c, ["w1", "w2"])
        version = model["version"]
        assert model["barrier"] == "pending"
        assert model["config"]["elasticityFactor"] == 1
        all_tasks = sorted(n for cont in model["containers"].values() for n in cont["tasks"])
        assert all_tasks == [f"Partition {p}" for p in range(4)]
        r = c.get("/jobmodel")
        assert r.headers["etag"] == f'"{version}"'
        assert c.get("/jobmodel", headers={"If-None-Match": f'"{version}"'}).status_code == 304
        only = c.get("/jobmodel", params={"processorId": "w1"}).json()
        assert list(only["containers"]) == ["w1"]
        # long poll with nothing newer: 304 after waitMs
        started = time.monotonic()
        r = c.get("/jobmodel", params={"since": version, "waitMs": 300})
        assert r.status_code == 304
        assert time.monotonic() - started >= 0.28
        assert w1.ack(version).json() == {"barrier": "pending"}
        # waiting for the barrier: answers as soon as it leaves "pending"
        started = time.monotonic()
        with httpx.Client(base_url=server.url, timeout=30) as other:
            import threading

            result: dict[str, httpx.Response] = {}
            t = threading.Thread(target=lambda: result.setdefault("r", other.get(
                "/jobmodel", params={"since": version, "waitMs": 5000, "barrier": "pending"})))
            t.start()
            time.sleep(0.2)
            assert w2.ack(version).json() == {"barrier": "done"}
            t.join(5)
        assert result["r"].status_code == 200
        assert result["r"].json()["barrier"] == "done"
        assert time.monotonic() - started < 2


def test_long_poll_wakes_within_100ms_of_a_publication(start_server: StartServer) -> None:
    server = start_server(*FAST)
    with server.client() as c:
        w1 = SimWorker(c, "w1", "host-a")
        w1.register()
        version = wait_for_version(c, 0)["version"]
        ack_all([w1], version)
        import threading

        woke: dict[str, float] = {}

        def poll() -> None:
            with httpx.Client(base_url=server.url, timeout=30) as other:
                r = other.get("/jobmodel", params={"since": version, "waitMs": 10_000})
                woke["at"] = time.monotonic()
                woke["status"] = r.status_code

        t = threading.Thread(target=poll)
        t.start()
        time.sleep(0.3)
        sent = time.monotonic()
        assert c.post("/scale", json={"elasticityFactor": 2}).status_code == 202
        published = time.monotonic()
        t.join(10)
        assert woke["status"] == 200
        # the scale call returns once the version is published
        assert woke["at"] - published < 0.1, (woke["at"] - sent, published - sent)


def _both_in_a_version(c: httpx.Client, w1: SimWorker, w2: SimWorker) -> int:
    """The first version with both processors. Two registrations sent one after another
    fall into one debounce window only when the machine keeps up (CI once built version
    1 with w1 alone); both heartbeat while they wait, so that neither 1.5 s lease runs
    out before the test means it to."""
    since = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert w1.heartbeat().status_code == 200
        assert w2.heartbeat().status_code == 200
        r = c.get("/jobmodel", params={"since": since, "waitMs": 300})
        if r.status_code == 200:
            if sorted(r.json()["containers"]) == ["w1", "w2"]:
                return int(r.json()["version"])
            since = r.json()["version"]
    raise AssertionError("no version had both processors")


def test_lease_expiry_removes_the_processor_and_rebalances(start_server: StartServer) -> None:
    server = start_server(*FAST)
    with server.client() as c:
        w1, w2 = SimWorker(c, "w1", "host-a"), SimWorker(c, "w2", "host-b")
        w1.register()
        w2.register()
        version = _both_in_a_version(c, w1, w2)
        ack_all([w1, w2], version)
        deadline = time.monotonic() + 6
        model = None
        while time.monotonic() < deadline:  # only w1 heartbeats
            assert w1.heartbeat().status_code == 200
            r = c.get("/jobmodel", params={"since": version, "waitMs": 300})
            if r.status_code == 200 and list(r.json()["containers"]) == ["w1"]:
                model = r.json()
                break
        assert model is not None, "w2's lease did not expire"
        gone = w2.heartbeat()
        assert gone.status_code == 404
        assert gone.json()["error"] == "unknown_processor"
        assert sorted(model["containers"]["w1"]["tasks"]) == [f"Partition {p}" for p in range(4)]
        assert c.get("/status").json()["lastRebalance"]["reason"] == "lease_expired"


def test_barrier_timeout_regenerates_without_the_silent_processor(
    start_server: StartServer,
) -> None:
    server = start_server(*FAST, "--lease-ttl-ms", "60000")
    with server.client() as c:
        w1, w2 = SimWorker(c, "w1", "host-a"), SimWorker(c, "w2", "host-b")
        w1.register()
        w2.register()
        version = wait_for_members(c, ["w1", "w2"])["version"]
        assert w1.ack(version).json()["barrier"] == "pending"  # w2 stays silent
        model = wait_for_version(c, version, wait_ms=5000)
        assert model["version"] > version
        assert list(model["containers"]) == ["w1"]
        assert c.get("/status").json()["lastRebalance"]["reason"] == "barrier_timeout"
        assert w2.heartbeat().status_code == 404  # the silent processor must register again


def test_ack_errors(start_server: StartServer) -> None:
    server = start_server(*FAST)
    with server.client() as c:
        w1 = SimWorker(c, "w1", "host-a")
        w1.register()
        version = wait_for_version(c, 0)["version"]
        unknown = c.post(f"/jobmodel/{version + 5}/ack", json={"processorId": "w1"},
                         headers=w1.lease)
        assert unknown.status_code == 404
        assert unknown.json()["error"] == "unknown_job_model_version"
        stranger = c.post(f"/jobmodel/{version}/ack", json={"processorId": "nobody"})
        assert stranger.status_code == 404
        assert stranger.json()["error"] == "unknown_processor"
        extra = c.post(f"/jobmodel/{version}/ack", json={"processorId": "w1", "x": 1},
                       headers=w1.lease)
        assert extra.status_code == 422
        assert extra.json()["error"] == "invalid_request"


def test_json_logs_name_the_rebalance_reason_and_version(start_server: StartServer) -> None:
    import json

    server = start_server(*FAST, "--log-json")
    with server.client() as c:
        SimWorker(c, "w1", "host-a").register()
        wait_for_version(c, 0)
    server.stop()
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    published = [x for x in lines if x["message"].startswith("published job model version 1")]
    assert published and published[0]["reason"] == "join" and published[0]["version"] == 1
