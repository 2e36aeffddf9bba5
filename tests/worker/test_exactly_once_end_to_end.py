"""Exactly-once output end to end (#28): the counting app (stateful) and an echo app
(stateless) with --exactly-once on real Kafka and Spark, two workers as processes, factor
2 -> 4 -> 2, a kill -9 mid-run, a worker that dies between a transaction's commit and its
checkpoint's post (the test hook) and comes back, a worker stopped (SIGSTOP) mid-batch
past its lease and resumed after its tasks moved, and a graceful leave: a read_committed
reader finds every (key, seq) exactly once, in order, with count == seq + 1 (stateful).
And a Kinesis job, stateless and stateful (one standby per task), with a split and such
a stopped worker."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from service.local.kafka import LocalKafka
from service.local.kinesis import CREDENTIALS as KINESIS_CREDENTIALS
from service.local.kinesis import LocalKinesis
from service.local.ports import kill_process_group
from tests.service.conftest import StartServer
from tests.service.test_kinesis_inputs import kinesis_client, wait_active
from tests.worker.test_end_to_end import (
    Producing,
    coordinator_for,
    crash,
    new_topics,
    start_worker,
    stop_workers,
)
from tests.worker.test_kinesis_end_to_end import Producing as KinesisProducing
from tests.worker.test_kinesis_end_to_end import split
from tests.worker.test_stateful_end_to_end import (
    settled,
    split_reads_job,
    stateful_worker,
    trickle_in_the_driver,
)

# beside: run in a second pytest process beside the rest of the run (tests/infra/beside.py)
pytestmark = [pytest.mark.slow, pytest.mark.beside]


def read_committed(kafka: LocalKafka, topic: str) -> list[dict[str, Any]]:
    """Every record a read_committed reader finds in ``topic`` (one partition) now."""
    consumer = Consumer(kafka.client_settings().client({
        "group.id": uuid.uuid4().hex, "isolation.level": "read_committed",
        "enable.auto.commit": False, "log_level": 2}))
    out: list[dict[str, Any]] = []
    try:
        tp = TopicPartition(topic, 0)
        end = consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 60
        # up to the end as it is now: open transactions below it end within a commit
        while end > 0 and int(consumer.position([tp])[0].offset or 0) < end:
            assert time.monotonic() < deadline, "the output's open transactions never ended"
            for msg in consumer.consume(500, 0.2):
                assert msg.error() is None, msg.error()
                out.append(json.loads(msg.value() or b"{}"))
    finally:
        consumer.close()
    return out


def wait_committed(kafka: LocalKafka, topic: str, expected: int,
                   workers: dict[str, subprocess.Popen[bytes]], tmp: Path,
                   timeout_s: float = 240) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        records = read_committed(kafka, topic)
        if len(records) >= expected:
            return records
        for pid, w in workers.items():
            assert w.poll() is None, (tmp / f"{pid}.log").read_text()[-3000:]
        assert time.monotonic() < deadline, f"only {len(records)} of {expected} committed"
        time.sleep(0.5)


def check_exactly_once(records: list[dict[str, Any]], producing: Any,
                       counts: bool = True) -> None:
    """Every (key, seq) exactly once, per key in order, count == seq + 1 (``counts``)."""
    seen: dict[str, list[int]] = defaultdict(list)
    for r in records:
        assert not counts or r["count"] == r["seq"] + 1, r
        seen[r["key"]].append(r["seq"])
    missing = {k: n for k, n in producing.seq.items() if len(seen.get(k, [])) != n}
    assert not missing, {k: (n, seen.get(k, [])[:30]) for k, n in list(missing.items())[:3]}
    for key, seqs in seen.items():
        assert seqs == list(range(producing.seq[key])), (key, seqs[:40])


@pytest.mark.parametrize("stateful", [True, False], ids=["stateful", "stateless"])
def test_kills_a_crash_between_commit_and_post_a_zombie_rescales_and_a_leave_duplicate_nothing(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path, stateful: bool,
) -> None:
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(600)
    server = coordinator_for(start_server, kafka, topic, *(["--stateful"] * stateful),
                             "--elasticity-factor", "2", "--lease-ttl-ms", "6000")
    # 4 ms a record (an external call): a stopped worker is stopped mid-batch
    app = "tests.worker.apps:" + ("slow_count_task" if stateful else "slow_echo_task")

    def worker(pid: str, **env: str) -> subprocess.Popen[bytes]:
        state = ["--stateful", "--state-dir", str(tmp_path / f"state-{pid}")] * stateful
        return start_worker(tmp_path, server.url, kafka, output, pid, "--api", "task",
                            "--output-topic", output, "--exactly-once", *state, app=app,
                            env=env)

    workers = {"w0": worker("w0"), "w1": worker("w1")}
    hooked = ""
    try:
        wait_committed(kafka, output, 300, workers, tmp_path)
        producing.send(600)
        time.sleep(1)
        crash(workers["w1"])  # kill -9 mid-run: its open transaction is fenced
        # its next incarnation dies right after its second transaction commits, before
        # its post, in the middle of a rescale
        workers["w1"] = worker("w1", COXSWAIN_TEST_EXIT_AFTER_TRANSACTIONS="2")
        with server.client() as c:
            assert c.post("/scale", json={"elasticityFactor": 4}).status_code == 202
        deadline = time.monotonic() + 240
        while workers["w1"].poll() is None:  # records for its tasks once it has some
            assert time.monotonic() < deadline, (tmp_path / "w1.log").read_text()[-3000:]
            producing.send(50)
            time.sleep(1)
        hooked = (tmp_path / "w1.log").read_text()
        assert workers["w1"].returncode == 137, hooked[-3000:]
        kill_process_group(workers["w1"].pid)  # its Spark JVM, as a host crash would
        workers["w1"] = worker("w1")  # the one after recovers that checkpoint
        producing.send(600)
        wait_committed(kafka, output, producing.total, workers, tmp_path)
        with server.client() as c:
            assert c.post("/scale", json={"elasticityFactor": 2}).status_code == 202
        producing.send(600)
        wait_committed(kafka, output, producing.total, workers, tmp_path)
        # a zombie: w1 (its whole process group) stopped mid-batch past its lease; its
        # tasks move to w0, which fences it; resumed, it cannot commit that batch, and
        # it registers again by itself. First w1 must hold tasks and write under them
        with server.client() as c:
            version = settled(c, ["w0", "w1"])["version"]
        producing.send(600)
        records = wait_committed(kafka, output, producing.total, workers, tmp_path)
        assert any(r["processor"] == "w1" and r["version"] == version for r in records)
        producing.send(600)
        time.sleep(0.5)
        os.killpg(workers["w1"].pid, signal.SIGSTOP)
        with server.client() as c:
            settled(c, ["w0"])
        wait_committed(kafka, output, producing.total, {"w0": workers["w0"]}, tmp_path)
        os.killpg(workers["w1"].pid, signal.SIGCONT)
        with server.client() as c:
            settled(c, ["w0", "w1"])
        producing.send(600)
        wait_committed(kafka, output, producing.total, workers, tmp_path)
        workers["w0"].send_signal(signal.SIGTERM)  # a graceful leave
        assert workers["w0"].wait(120) == 0
        producing.send(600)
        rest = {k: v for k, v in workers.items() if k != "w0"}
        records = wait_committed(kafka, output, producing.total, rest, tmp_path)
    finally:
        for w in workers.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(w.pid, signal.SIGCONT)
        stop_workers(list(workers.values()))
    time.sleep(2)
    records = read_committed(kafka, output)
    check_exactly_once(records, producing, counts=stateful)
    logs = {pid: (tmp_path / f"{pid}.log").read_text() for pid in workers}
    assert "test hook: exiting after transaction 2" in hooked
    assert any("recovered its last checkpoint" in log for log in logs.values())
    # the woken zombie found itself out (its lease gone, or its producer fenced)
    woken = logs["w1"].split("worker process ")[-1]
    assert re.search(r"lease lost|transactional id \S+ fenced|a commit was fenced", woken), \
        woken[-3000:]
    print(f"{len(records)} records, each exactly once")


def test_a_batch_that_splits_its_reads_among_its_tasks_commits_each_record_once(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    """Exactly-once output with split reads (``task_reads.split_reads``): 8 tasks with
    state over 2 partitions on 4 cores, each partition read by two Spark tasks whose
    output goes into one transaction, and a kill -9 mid-run: a read_committed reader
    finds every (key, seq) once, in order, with count == seq + 1."""
    output, producing, server = split_reads_job(start_server, kafka)

    def worker() -> subprocess.Popen[bytes]:
        started: subprocess.Popen[bytes] = stateful_worker(
            tmp_path, server, kafka, output, "w0", f"file://{tmp_path / 'blobs'}",
            "--exactly-once", "--spark-master", "local[4]",
            "--log-level", "INFO,coxswain.worker.batches=DEBUG")
        return started

    w0 = worker()
    try:
        wait_committed(kafka, output, producing.total, {"w0": w0}, tmp_path)
        producing.send(400)
        time.sleep(1)
        crash(w0)  # kill -9, mid-batch or between: its open transaction is fenced
        w0 = worker()  # its tasks back from its own snapshots
        for _ in range(3):
            producing.send(200)
            time.sleep(0.3)
        wait_committed(kafka, output, producing.total, {"w0": w0}, tmp_path)
    finally:
        stop_workers([w0])
    log = (tmp_path / "w0.log").read_text()
    assert re.search(r"batch \d+: \d+ ranges read by 4 Spark tasks", log), log[-3000:]
    check_exactly_once(read_committed(kafka, output), producing)


def test_small_batches_the_driver_runs_commit_their_output_in_transactions_once(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    """A trickle run in the driver (``worker.runtime.driver_batches``) hands its output to
    the batch's transaction as a Spark batch does: with a kill -9 between, a
    read_committed reader finds every (key, seq) once, in order, count == seq + 1."""
    output, producing = trickle_in_the_driver(
        start_server, kafka, tmp_path,
        lambda topic, total, worker: wait_committed(kafka, topic, total, {"w0": worker},
                                                    tmp_path),
        "--exactly-once")
    check_exactly_once(read_committed(kafka, output), producing)


@pytest.mark.parametrize("stateful", [False, True], ids=["stateless", "stateful"])
def test_a_kinesis_job_fences_a_stopped_worker_that_wakes_after_its_tasks_moved(
    start_server: StartServer, kafka: LocalKafka, kinesis: LocalKinesis, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, stateful: bool,
) -> None:
    """Kinesis input, a shard split: w1 is stopped (SIGSTOP, its whole process group)
    past its lease, its tasks move to w0, and it is resumed mid-batch with an open
    transaction: a zombie. It cannot commit (fenced by w0 before w0 acked the version
    that removed it), registers again by itself, and nothing comes out twice. Stateful:
    the counting app with one standby per task, its state backed up to a blob store; the
    split's children count on from their parents' state, and every (key, seq) is
    committed once with count == seq + 1."""
    for name, value in KINESIS_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    client = kinesis_client(kinesis)
    stream = f"eo-{uuid.uuid4().hex[:8]}"
    client.create_stream(StreamName=stream, ShardCount=2)
    wait_active(client, stream)
    _, output = new_topics(kafka, 1)
    producing = KinesisProducing(client, stream)
    producing.send(200)
    server = start_server("--input", f"kinesis.{stream}", "--kinesis-endpoint",
                          kinesis.endpoint, "--partition-poll-interval-ms", "500",
                          "--elasticity-factor", "2", "--debounce-ms", "300",
                          "--lease-ttl-ms", "4000",
                          *(["--stateful", "--num-standbys", "1"] if stateful else []))
    # 5 ms a record: a stopped worker is stopped mid-batch
    app = "tests.worker.apps:" + ("slow_kinesis_count_task" if stateful
                                  else "slow_kinesis_echo_task")

    def worker(pid: str) -> subprocess.Popen[bytes]:
        state = ["--stateful", "--state-dir", str(tmp_path / f"state-{pid}"),
                 "--blob-store", f"file://{tmp_path / 'blobs'}"] if stateful else []
        return start_worker(tmp_path, server.url, kafka, output, pid, "--api", "task",
                            "--output-topic", output, "--kinesis-endpoint",
                            kinesis.endpoint, "--exactly-once", *state, app=app)

    workers = {"w0": worker("w0"), "w1": worker("w1")}
    try:
        wait_committed(kafka, output, 200, workers, tmp_path)
        with server.client() as c:
            both = c.get("/jobmodel").json()
            assert set(both["containers"]) == {"w0", "w1"}
            os.killpg(workers["w1"].pid, signal.SIGSTOP)  # mid-batch: 5 ms a record
            producing.send(300)
            deadline = time.monotonic() + 60
            while True:  # w1's lease ran out: its tasks are w0's, the barrier done
                model = c.get("/jobmodel").json()
                if set(model["containers"]) == {"w0"} and model["barrier"] == "done":
                    break
                assert time.monotonic() < deadline, model["version"]
                time.sleep(0.3)
            assert model["config"].get("fencedProcessors") == ["w1"] or \
                model["version"] > both["version"] + 1
            wait_committed(kafka, output, 500, {"w0": workers["w0"]}, tmp_path)
            split(client, stream, "shardId-000000000000")
            producing.send(200)
            os.killpg(workers["w1"].pid, signal.SIGCONT)  # the zombie wakes
            wait_committed(kafka, output, 700, workers, tmp_path)
            deadline = time.monotonic() + 90
            while "w1" not in c.get("/jobmodel").json()["containers"]:  # back by itself
                assert time.monotonic() < deadline, "w1 never registered again"
                time.sleep(0.5)
            producing.send(200)
            wait_committed(kafka, output, producing.total, workers, tmp_path)
    finally:
        for w in workers.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(w.pid, signal.SIGCONT)
        stop_workers(list(workers.values()))
    time.sleep(2)
    records = read_committed(kafka, output)
    check_exactly_once(records, producing, counts=stateful)
    log = (tmp_path / "w1.log").read_text()
    assert "fenced" in log, log[-3000:]
    # the woken zombie found itself out (its lease gone, or its producer fenced)
    assert re.search(r"lease lost|transactional id \S+ fenced|a commit was fenced",
                     log.split("registered as w1")[1]), log[-3000:]
    if stateful:  # keys moved into the split's children counted on from their parents
        children = [r for r in records if r["shard"] >= 2]
        assert children and any(r["count"] > 1 for r in children), children[:5]
    print(f"{len(records)} records, each exactly once")
