"""Requests answered before routing (heartbeats, acks and a processor's own job model
polls: service.serving.post_shortcuts, service.serving.poll_shortcut) give exactly the
routes' answers, errors included, and have the routes' effects."""

from __future__ import annotations

import threading
from typing import Any

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
        # a bad lag is left out, with its reason: the lease is kept (both ways alike)
        r = c.post(path, json={"taskLags": {"Partition 0": -1}}, headers=lease)
        assert r.status_code == 200 and "dropped" in r.json()["warnings"][0], r.text
        assert "Partition 0" not in c.get("/status").json()["lagPerTask"]
        assert w1.heartbeat({"Partition 0": 7}).status_code == 200
        r = c.post(path, json={"unknown": 1}, headers=lease)
        assert r.status_code == 422, r.text
        # a JSON text sent as another content type is not read as JSON by the route
        r = c.post(path, content=b"{}", headers={**lease, "content-type": "text/plain"})
        assert r.status_code == 422, r.text
        # the lease still renews, and the last good report stands
        assert w1.heartbeat().status_code == 200
        assert c.get("/status").json()["lagPerTask"]["Partition 0"] == 7


def test_acks_and_their_refusals_are_the_routes(start_server: StartServer) -> None:
    server = start_server(*ARGS)
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=10) as c:
        w1, model = joined(c, "w1", "host-a")  # acked through the shortcut: done
        version = model["version"]
        assert c.get("/status").json()["barrier"] == "done"
        path, lease = f"/jobmodel/{version}/ack", SimWorker.lease_of("w1")
        r = w1.ack(version)  # again: idempotent
        assert (r.status_code, r.json()) == (200, {"barrier": "done"})
        assert r.headers["content-type"] == "application/json"
        # refusals of the coordinator: API.md's error bodies
        r = c.post(path, json={"processorId": "w1"})
        assert (r.status_code, r.json()["error"]) == (401, "lease_token_required")
        r = c.post(path, json={"processorId": "w1"},
                   headers={"Coxswain-Lease-Token": "not-this-one"})
        assert (r.status_code, r.json()["error"]) == (409, "fenced")
        assert set(r.json()) == {"error", "detail"}
        r = c.post(path, json={"processorId": "nobody"}, headers=lease)
        assert (r.status_code, r.json()["error"]) == (404, "unknown_processor")
        r = c.post("/jobmodel/999/ack", json={"processorId": "w1"}, headers=lease)
        assert (r.status_code, r.json()["error"]) == (404, "unknown_job_model_version")
        # a processor that joined after the version is not one of its participants
        w2 = SimWorker(c, "w2", "host-b")
        assert w2.register().status_code == 201
        r = w2.ack(version)
        assert (r.status_code, r.json()["error"]) == (409, "not_a_participant")
        # what the route refuses itself: no worker token, bad bodies, a bad version
        r = httpx.post(server.url + path, json={"processorId": "w1"}, headers=lease)
        assert r.status_code == 401, r.text
        r = c.post(path, content=b"{", headers={**lease, "content-type": "application/json"})
        assert (r.status_code, r.json()["error"]) == (400, "malformed_json")
        r = c.post(path, json={"processorId": ""}, headers=lease)
        assert r.status_code == 422, r.text
        r = c.post(path, content=b'{"processorId": "w1"}',
                   headers={**lease, "content-type": "text/plain"})
        assert r.status_code == 422, r.text
        r = c.post("/jobmodel/v1/ack", json={"processorId": "w1"}, headers=lease)
        assert r.status_code == 422, r.text


def same_answer(c: httpx.Client, params: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
    """The answer of the poll shortcut to ``params``, checked equal to the route's (an
    unknown parameter, which the route ignores, sends the same request there)."""
    fast = c.get("/jobmodel", params=params, headers=headers)
    slow = c.get("/jobmodel", params={**params, "routed": "1"}, headers=headers)
    assert (fast.status_code, fast.content) == (slow.status_code, slow.content)
    for header in ("etag", "content-type", "content-length"):
        assert fast.headers.get(header) == slow.headers.get(header), header
    return fast


def test_a_processors_own_poll_is_the_routes(start_server: StartServer) -> None:
    server = start_server(*ARGS)
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=10) as c:
        # before any job model: a 304 without an ETag
        r = same_answer(c, {"processorId": "w1", "since": 0, "waitMs": 50}, {})
        assert r.status_code == 304 and "etag" not in r.headers
        _, model = joined(c, "w1", "host-a")
        version, lease = model["version"], SimWorker.lease_of("w1")
        r = same_answer(c, {"processorId": "w1", "since": 0}, lease)
        assert r.status_code == 200 and r.json()["version"] == version
        assert r.json()["containers"].keys() == {"w1"}
        assert r.json()["barrier"] == "done"
        assert r.headers["etag"] == f'"{version}"'
        r = same_answer(c, {"processorId": "someone-else", "since": 0}, {})
        assert r.json()["containers"] == {}
        # nothing newer: 304 with the ETag, at once and after a wait
        assert same_answer(c, {"processorId": "w1", "since": version}, lease).status_code == 304
        r = same_answer(c, {"processorId": "w1", "since": version, "waitMs": 100}, lease)
        assert (r.status_code, r.headers["etag"]) == (304, f'"{version}"')
        # the barrier left "pending": answered at once
        r = same_answer(c, {"processorId": "w1", "since": version, "barrier": "pending",
                            "waitMs": 5000}, lease)
        assert r.status_code == 200 and r.json()["barrier"] == "done"
        # what the route refuses: bad numbers, unknown barrier states, no worker token
        for bad in ({"since": -1}, {"since": "x"}, {"waitMs": -5}, {"barrier": "gone"}):
            r = c.get("/jobmodel", params={"processorId": "w1", "since": version, **bad})
            assert r.status_code == 422, (bad, r.text)
        r = httpx.get(server.url + "/jobmodel", params={"processorId": "w1", "since": 0})
        assert r.status_code == 401


def test_a_processors_long_poll_wakes_with_the_next_version(start_server: StartServer) -> None:
    server = start_server(*ARGS)
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as c:
        _, model = joined(c, "w1", "host-a")
        answers: list[httpx.Response] = []
        poll = threading.Thread(target=lambda: answers.append(c.get("/jobmodel", params={
            "processorId": "w1", "since": model["version"], "waitMs": 20000},
            headers=SimWorker.lease_of("w1"))))
        poll.start()
        try:
            assert SimWorker(c, "w2", "host-b").register().status_code == 201
        finally:
            poll.join(25)
        assert answers and answers[0].status_code == 200, answers
        newer = answers[0].json()
        assert newer["version"] == model["version"] + 1
        assert newer["containers"].keys() == {"w1"}
        assert len(newer["containers"]["w1"]["tasks"]) == 1  # the other went to w2


def test_which_polls_the_shortcut_answers() -> None:
    """The shortcut takes a processor's own poll and leaves the rest to the route (so the
    comparisons above compare the shortcut with the route)."""
    from types import SimpleNamespace

    from service.serving.poll_shortcut import _processor_poll
    from service.settings import Settings

    settings = Settings(worker_token="wt-0123456789abcdef")
    app = SimpleNamespace(state=SimpleNamespace(coordinator=object(), settings=settings))

    def taken(query: bytes, *headers: tuple[bytes, bytes]) -> bool:
        scope = {"app": app, "query_string": query,
                 "headers": [(b"authorization", b"Bearer wt-0123456789abcdef"), *headers]}
        return _processor_poll(scope) is not None

    assert taken(b"processorId=w1&since=3&waitMs=1000")
    assert taken(b"processorId=w1&since=3&waitMs=1000&barrier=pending",
                 (b"coxswain-lease-token", b"t"))
    assert taken(b"processorId=w%201&since=0")
    for query in (b"processorId=w1&since=3&routed=1", b"since=3", b"processorId=w1",
                  b"processorId=&since=3", b"processorId=w1&since=-1",
                  b"processorId=w1&since=3&since=4", b"processorId=w1&since=3&barrier=x",
                  b"processorId=w1&since=3&waitMs=1.5", b"processorId=w1&since=+3",
                  b"processorId=" + b"p" * 256 + b"&since=3", b"processorId=w1&since=3&"):
        assert not taken(query), query
    assert not taken(b"processorId=w1&since=3", (b"coxswain-lease-token", b"t" * 129))
    assert not taken(b"processorId=w1&since=3", (b"content-length", b"2"))
    scope = {"app": app, "query_string": b"processorId=w1&since=3", "headers": []}
    assert _processor_poll(scope) is None  # no worker token: the route's 401


def test_a_poll_with_a_lost_or_replaced_lease_is_refused_as_a_heartbeat_would_be(
    start_server: StartServer,
) -> None:
    """A worker learns it lost its lease from its own poll too (its lease token no longer
    names a live lease): 404 unknown_processor; another incarnation's token: 409 fenced.
    Both ways, the shortcut (``since``) and the route (none)."""
    server = start_server(*ARGS)
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=10) as c:
        w1, model = joined(c, "w1", "host-a")
        old = SimWorker.lease_of("w1")
        params = {"processorId": "w1", "since": model["version"], "waitMs": 10}
        assert c.get("/jobmodel", params=params, headers=old).status_code == 304
        assert w1.register().status_code == 200  # a new incarnation: a new token
        for query in (params, {"processorId": "w1"}):
            r = c.get("/jobmodel", params=query, headers=old)
            assert (r.status_code, r.json()["error"]) == (409, "fenced"), r.text
        assert w1.leave().status_code == 204
        for query in (params, {"processorId": "w1"}):
            r = c.get("/jobmodel", params=query, headers=SimWorker.lease_of("w1"))
            assert (r.status_code, r.json()["error"]) == (404, "unknown_processor"), r.text
            # without a lease token it is anyone's read of the job model
            assert c.get("/jobmodel", params=query).status_code in (200, 304)
