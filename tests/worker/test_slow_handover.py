"""A live processor slow to hand over is not dropped (issue #49), end to end: a worker
whose batch in flight outlasts the barrier timeout many times over (a process_batch app,
which cannot be cut short, 10 s a batch, as on a starved machine) reports handing over
in its heartbeats, and the leader extends the barrier for it instead of dropping it; it
keeps its lease (registered once) and every record is processed once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from service.local.kafka import LocalKafka
from tests.service.conftest import StartServer
from tests.worker.test_end_to_end import (
    Producing,
    coordinator_for,
    new_topics,
    read_all,
    start_worker,
    stop_workers,
    wait_output,
)

pytestmark = [pytest.mark.slow, pytest.mark.beside]


def test_a_worker_handing_over_past_the_barrier_timeout_is_waited_for_not_dropped(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(100)
    # the barrier times out after 3 s, a batch of w0 takes 10 s: the join's version
    # finds w0 in a batch, and its hand-over outlasts the timeout
    server = coordinator_for(start_server, kafka, topic, "--barrier-timeout-ms", "3000",
                             "--barrier-max-ms", "120000", "--heartbeat-interval-ms", "500",
                             "--lease-ttl-ms", "20000")
    slow = {"BATCH_SLEEP_S": "10"}
    workers = {"w0": start_worker(tmp_path, server.url, kafka, output, "w0",
                                  app="tests.worker.apps:slow_record_to_topic", env=slow)}
    try:
        wait_output(kafka, output, producing.total, timeout_s=240)
        workers["w1"] = start_worker(tmp_path, server.url, kafka, output, "w1",
                                     app="tests.worker.apps:slow_record_to_topic", env=slow)
        with server.client() as c:
            deadline = time.monotonic() + 240
            while sorted(c.get("/jobmodel").json().get("containers") or {}) != ["w0", "w1"]:
                assert time.monotonic() < deadline, "w1 never joined"
                assert all(w.poll() is None for w in workers.values())
                producing.send(10)  # w0 always has a batch in flight
                time.sleep(1)
            joined = c.get("/jobmodel").json()["version"]
            deadline = time.monotonic() + 120
            while (status := c.get("/status").json())["barrier"] == "pending":
                assert time.monotonic() < deadline, "the barrier never ended"
                time.sleep(0.5)
            # it completed (w0 acked once its batch was over): no version after it
            assert (status["barrier"], status["latestVersion"]) == ("done", joined), status
        producing.send(100)
        wait_output(kafka, output, producing.total, timeout_s=240)
    finally:
        stop_workers(list(workers.values()))
    log = server.log()
    assert "still handing over" in log, log[-3000:]  # the barrier was extended for w0
    assert "dropping silent processors" not in log, log[-3000:]
    w0 = (tmp_path / "w0.log").read_text()
    assert w0.count("registered as w0") == 1, w0[-3000:]
    assert "lease lost" not in w0, w0[-3000:]
    records = read_all(kafka, output)
    seen = [(r["key"], r["seq"]) for r in records]
    assert len(seen) == len(set(seen)) == producing.total  # each record once
