"""Batches cut short by a change (``worker.cuts``), end to end (real Kafka, coordinator,
PySpark workers as processes): two saturated workers with long batches (4 ms of work per
record, a 4 s target) scale 2 -> 4 -> 2 while producing. A change cuts the batch in
flight at the next piece of a task's rows; what each task processed is committed and the
rest is read again. Nothing is lost, every key stays in order, a graceful change
duplicates nothing, and with state every count is exact (count == seq + 1)."""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path

import pytest

from service.local.kafka import LocalKafka
from tests.service.conftest import StartServer
from tests.worker.test_end_to_end import (
    Producing,
    coordinator_for,
    new_topics,
    queries_started,
    read_all,
    start_worker,
    stop_workers,
    wait_output,
)
from tests.worker.test_stateful_end_to_end import check_counts

# beside: run in a second pytest process beside the rest of the run (tests/infra/beside.py)
pytestmark = [pytest.mark.slow, pytest.mark.beside]


@pytest.mark.parametrize("stateful", [False, True], ids=["stateless", "stateful"])
def test_a_change_cuts_the_batches_in_flight_and_loses_or_repeats_nothing(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path, stateful: bool,
) -> None:
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(600)
    server = coordinator_for(start_server, kafka, topic, "--partition-poll-interval-ms",
                             "1000", "--elasticity-factor", "2",
                             *(["--stateful"] if stateful else []))
    app = "tests.worker.apps:slow_count_task" if stateful else \
        "tests.worker.apps:slow_echo_task"

    def worker(pid: str) -> object:
        state = ["--stateful", "--state-dir", str(tmp_path / f"state-{pid}"),
                 "--blob-store", f"file://{tmp_path / 'blobs'}"] if stateful else []
        return start_worker(tmp_path, server.url, kafka, output, pid, "--api", "task",
                            "--output-topic", output, "--target-batch-ms", "4000",
                            "--max-offsets-per-trigger", "100000", "--spark-master",
                            "local[1]", *state, app=app)

    workers = [worker(p) for p in ("w0", "w1")]
    try:
        with server.client() as c:
            for factor in (4, 2):
                # mid-backlog: seconds of work left for each worker (1200 records of 4 ms
                # over two), and their batches running on it, so that the change arrives
                # while both are in a batch. Waiting for a count of output alone did not
                # say that: once a worker had drained its share, no change cut anything
                producing.send(1200)
                base = len(read_all(kafka, output))
                while len(read_all(kafka, output)) < base + 100:
                    time.sleep(0.5)
                assert c.post("/scale", json={"elasticityFactor": factor}).status_code == 202
                for _ in range(4):
                    producing.send(150)
                    time.sleep(0.5)
            wait_output(kafka, output, producing.total)
    finally:
        stop_workers(workers)  # type: ignore[arg-type]
    logs = "".join((tmp_path / f"{p}.log").read_text() for p in ("w0", "w1"))
    assert "cut short" in logs  # the changes did not wait for whole batches
    records = read_all(kafka, output)
    if stateful:
        check_counts(kafka, output, producing)
    seen = Counter((r["key"], r["seq"]) for r in records)
    assert set(seen) == {(k, s) for k, n in producing.seq.items() for s in range(n)}
    assert max(seen.values()) == 1, seen.most_common(3)  # graceful: no duplicate
    last: dict[str, int] = {}
    for r in records:  # per key in order
        assert r["seq"] > last.get(r["key"], -1), r
        last[r["key"]] = r["seq"]
    for pid in ("w0", "w1"):
        assert queries_started(tmp_path, pid) == [1]


@pytest.mark.parametrize("exactly_once", [False, True], ids=["plain", "exactly-once"])
def test_a_backlogs_first_batch_reads_it_whole_and_is_cut_at_its_target(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path, exactly_once: bool,
) -> None:
    """No probe of a few records and ramp: the first batch of a worker (no ceiling)
    reads the whole backlog, is cut once it ran past its target (2 s here: 4 ms a
    record, 2 000 records over 2 tasks would take 4 s), and the next batches are sized
    from what it got through; every record once, per key in order (with exactly-once
    output: a cut batch's transaction holds what its tasks processed, read as
    ``read_committed``)."""
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(2000)
    server = coordinator_for(start_server, kafka, topic)
    worker = start_worker(tmp_path, server.url, kafka, output, "w0", "--api", "task",
                          "--output-topic", output, "--target-batch-ms", "2000",
                          *(["--exactly-once"] if exactly_once else []),
                          app="tests.worker.apps:slow_echo_task", no_ceiling=True)
    try:
        wait_output(kafka, output, producing.total)
    finally:
        stop_workers([worker])
    log = (tmp_path / "w0.log").read_text()
    long = re.search(r"cut after ([\d.]+)s for running long, about (\d+) records processed: "
                     r"batches of (\d+) records", log)
    assert long, log[-3000:]
    # it got through part of the backlog, not all of it, nor nothing
    assert 0 < int(long[2]) < producing.total and 0 < int(long[3]) < producing.total, long[0]
    records = read_all(kafka, output)
    seen = Counter((r["key"], r["seq"]) for r in records)
    assert set(seen) == {(k, s) for k, n in producing.seq.items() for s in range(n)}
    assert max(seen.values()) == 1, seen.most_common(3)  # a cut repeats nothing
    last: dict[str, int] = {}
    for r in records:
        assert r["seq"] > last.get(r["key"], -1), r
        last[r["key"]] = r["seq"]
