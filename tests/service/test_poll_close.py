"""Failure detection from a closed long poll: a killed worker's connections close at once,
so the leader need not wait for its lease to run out (10 s); a worker that only lost a
connection shows life within the grace and keeps its lease and tasks."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import httpx

from tests.service.conftest import StartServer
from tests.service.server import Server
from tests.service.workers import SimWorker, ack_all, wait_for_members, wait_for_version

ARGS = ("--input", "kafka.orders:4", "--debounce-ms", "100", "--heartbeat-interval-ms",
        "2000", "--lease-ttl-ms", "10000")


def open_poll(server: Server, processor_id: str, since: int, token: str | None
              ) -> socket.socket:
    """A long poll of ``processor_id`` held open on a raw connection (closed by the test,
    as the kernel closes a killed process's)."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    lease = f"Coxswain-Lease-Token: {token}\r\n" if token else ""
    sock.sendall((f"GET /jobmodel?processorId={processor_id}&since={since}&waitMs=30000 "
                  f"HTTP/1.1\r\nHost: 127.0.0.1\r\n{lease}\r\n").encode())
    time.sleep(0.3)  # the server parks it
    return sock


def setup(c: httpx.Client) -> tuple[list[SimWorker], dict[str, Any]]:
    workers = [SimWorker(c, "w1", "a"), SimWorker(c, "w2", "b")]
    for w in workers:
        assert w.register().status_code == 201
    model = wait_for_members(c, ["w1", "w2"])
    assert ack_all(workers, model["version"]) == "done"
    return workers, model


def members(c: httpx.Client) -> set[str]:
    return {p["processorId"] for p in c.get("/processors").json()}


def test_a_closed_long_poll_with_no_sign_of_life_is_a_leave_within_seconds(
        start_server: StartServer) -> None:
    server = start_server(*ARGS)
    with server.client() as c:
        workers, model = setup(c)
        poll = open_poll(server, "w2", model["version"], SimWorker.tokens["w2"])
        workers[0].heartbeat()
        poll.close()  # kill -9 of w2: no more polls, no heartbeats
        closed = time.monotonic()
        newer = wait_for_version(c, model["version"])
        took = time.monotonic() - closed
        assert set(newer["containers"]) == {"w1"}
        assert "w2" not in members(c)
        assert 1.4 <= took <= 6.0, took  # the grace (1.5 s) and a debounce, not the TTL
        status = c.get("/status").json()
        assert "poll_closed" in status["lastRebalance"]["reason"]


def test_a_worker_that_polls_or_heartbeats_again_within_the_grace_keeps_its_tasks(
        start_server: StartServer) -> None:
    server = start_server(*ARGS)
    with server.client() as c:
        workers, model = setup(c)
        # a network blip: the poll's connection closes, the worker goes on polling as
        # workers do (a poll of up to a second after another)
        open_poll(server, "w2", model["version"], SimWorker.tokens["w2"]).close()
        for _ in range(5):
            assert workers[1].job_model(model["version"], wait_ms=500).status_code == 304
        # a switch to another replica: the poll closes here and the worker polls there;
        # its heartbeat on reconnecting arrives through whichever replica (they share the
        # store)
        open_poll(server, "w2", model["version"], SimWorker.tokens["w2"]).close()
        time.sleep(0.5)
        assert workers[1].heartbeat().status_code == 200
        assert workers[0].heartbeat().status_code == 200  # w1's lease holds on a slow run
        time.sleep(3.0)  # well past the grace and a debounce
        assert members(c) == {"w1", "w2"}
        assert c.get("/jobmodel").json()["version"] == model["version"]


def test_only_the_processors_own_poll_counts_and_the_grace_can_be_off(
        start_server: StartServer, tmp_path: Path) -> None:
    server = start_server(*ARGS)
    with server.client() as c:
        _, model = setup(c)
        # anyone with the worker token could open a poll naming w2: without w2's lease
        # token (or with another), its closing says nothing about w2
        open_poll(server, "w2", model["version"], None).close()
        open_poll(server, "w2", model["version"], "not-w2s-token").close()
        time.sleep(2.5)
        assert members(c) == {"w1", "w2"}
    off = start_server(*ARGS, "--poll-close-grace-ms", "0", data_dir=tmp_path / "off")
    with off.client() as c:
        _, model = setup(c)
        open_poll(off, "w2", model["version"], SimWorker.tokens["w2"]).close()
        time.sleep(2.5)
        assert members(c) == {"w1", "w2"}  # the lease TTL alone decides
