"""End to end on a real Kafka broker, a real coordinator and PySpark workers as separate
processes: every record is processed, per key in order, with no duplicates caused by
scale changes. Slow: each worker is a Spark application."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer

from service.local.kafka import LocalKafka
from service.local.orders import create_topics, read_json_records
from service.local.ports import kill_process_group, stop_process_group
from tests.service.conftest import StartServer
from tests.service.server import Server

pytestmark = pytest.mark.slow
KEYS = 300


class Producing:
    """Keyed records, each key's carrying 0, 1, 2, ... as its value."""

    def __init__(self, kafka: LocalKafka, topic: str) -> None:
        # confluent-kafka's default partitioner (librdkafka's CRC-32 of the key), as a
        # Python user has it: a new job's key hash (xxhash64) is independent of it
        self.producer = Producer(kafka.client_settings().client(
            {"acks": "all", "enable.idempotence": True, "log_level": 2}))
        self.topic = topic
        self.seq: dict[str, int] = defaultdict(int)
        self.total = 0

    def send(self, n: int) -> None:
        for i in range(n):
            key = f"key-{(self.total + i) * 7919 % KEYS}"
            self.producer.produce(self.topic, key=key.encode(),
                                  value=str(self.seq[key]).encode())
            self.seq[key] += 1
        self.total += n
        self.producer.flush(30)

    def send_key(self, key: str, n: int) -> None:
        """``n`` records of one key (a hot key)."""
        for _ in range(n):
            self.producer.produce(self.topic, key=key.encode(),
                                  value=str(self.seq[key]).encode())
            self.seq[key] += 1
        self.total += n
        self.producer.flush(30)


def read_all(kafka: LocalKafka, topic: str) -> list[dict[str, Any]]:
    return read_json_records(kafka.client_settings(), topic)


def start_worker(tmp: Path, url: str, kafka: LocalKafka, output: str, pid: str,
                 *extra: str, app: str | None = None, env: dict[str, str] | None = None,
                 cwd: Path | None = None, no_ceiling: bool = False
                 ) -> subprocess.Popen[bytes]:
    """A worker process (its log in ``tmp``), reading at most 400 records a batch unless
    ``no_ceiling`` (the batch size steered from the worker's own default)."""
    log = (tmp / f"{pid}.log").open("ab")
    app = app or ("tests.worker.apps:echo_task" if "--api" in extra
                  else "tests.worker.apps:record_to_topic")
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "worker", "--coordinator", url,
         "--app", app, "--kafka-bootstrap", kafka.bootstrap,
         "--processor-id", pid, "--location", f"host-{pid}", "--spark-master", "local[2]",
         *([] if no_ceiling else ["--max-offsets-per-trigger", "400"]), *extra],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,  # its JVM in its group
        cwd=cwd,  # another release's source (its modules first on -m's path)
        env={**os.environ, "KAFKA_BOOTSTRAP": kafka.bootstrap, "OUTPUT_TOPIC": output,
             **(env or {})})


def queries_started(tmp: Path, pid: str) -> list[int]:
    """How many Spark queries each process of worker ``pid`` started, from its log (every
    process appends to it, and logs its start once): one per process, or none when it
    never got a task or a standby copy (a worker's query starts with the first)."""
    runs = (tmp / f"{pid}.log").read_text().split("worker process ")[1:]
    return [len(re.findall(r"query [0-9a-f-]{36} started", r)) for r in runs]


def first_occurrences(records: list[dict[str, Any]]
                      ) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Output records by key, each (key, seq) once at its first occurrence (with ``at``, its
    index in the output), and the first occurrences of those that came again (with
    ``again``, the repeat)."""
    first: dict[tuple[str, int], dict[str, Any]] = {}
    duplicated: list[dict[str, Any]] = []
    per_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for i, r in enumerate(records):
        k = (r["key"], r["seq"])
        if k in first:
            duplicated.append(first[k] | {"again": r})
            continue
        first[k] = r | {"at": i}
        per_key[r["key"]].append(first[k])
    return per_key, duplicated


def check_lost_and_order(records: list[dict[str, Any]], producing: Producing
                         ) -> list[dict[str, Any]]:
    """Every produced record came out and each key's first occurrences are in order;
    the duplicates (``first_occurrences``)."""
    per_key, duplicated = first_occurrences(records)
    assert {k: sorted(r["seq"] for r in v) for k, v in per_key.items()} == {
        k: list(range(n)) for k, n in producing.seq.items()}  # nothing lost
    for key, rs in per_key.items():  # per key in order, duplicates removed
        seqs = [r["seq"] for r in rs]
        assert seqs == sorted(seqs), (key, seqs[:20])
    return duplicated


def new_topics(kafka: LocalKafka, partitions: int) -> tuple[str, str]:
    """A fresh input topic with ``partitions`` partitions and a one-partition output."""
    topic, output = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    create_topics(kafka.client_settings(), [(topic, partitions), (output, 1)])
    return topic, output


def coordinator_for(start_server: StartServer, kafka: LocalKafka, topic: str,
                    *extra: str) -> Server:
    """A coordinator over ``topic`` (partitions discovered from the broker), quick to
    rebalance."""
    return start_server("--kafka-bootstrap", kafka.bootstrap, "--input", f"kafka.{topic}",
                        "--debounce-ms", "300", *extra)


def stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM (a graceful leave) to every worker still running, by pid, then wait."""
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    for w in workers:
        stop_process_group(w, grace_s=60)


def crash(worker: subprocess.Popen[bytes]) -> None:
    """kill -9 of a worker and its Spark JVM (and Python workers), as a host crash would:
    an orphaned JVM would otherwise run on for a while, holding its state stores."""
    kill_process_group(worker.pid)
    worker.wait(30)


def wait_output(kafka: LocalKafka, output: str, expected: int, timeout_s: float = 240
                ) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        records = read_all(kafka, output)
        if len({(r["key"], r["seq"]) for r in records}) >= expected:
            return records
        assert time.monotonic() < deadline, f"only {len(records)} of {expected} processed"
        time.sleep(0.5)  # a read of the output is cheap; the tests wait here dozens of times


@pytest.mark.beside  # in the second process (tests/infra/beside.py)
def test_scaling_while_producing_loses_nothing_and_keeps_key_order(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path
) -> None:
    topic, output = new_topics(kafka, 4)
    producing = Producing(kafka, topic)
    producing.send(2000)
    server = coordinator_for(start_server, kafka, topic, "--partition-poll-interval-ms", "1000",
                             "--lease-ttl-ms", "20000", "--bucket-signal-min-records", "100")
    # w1 reads with Spark's Kafka connector: tasks move between the two readers. Their
    # ``process_batch`` app gets no per-task counting: every batch's buckets are counted
    # by a Spark job of their own here (30 s apart by default)
    counted = ("--bucket-sample-interval-ms", "1")
    workers = [start_worker(tmp_path, server.url, kafka, output, "w0", *counted),
               start_worker(tmp_path, server.url, kafka, output, "w1", "--kafka-reader", "jvm",
                            *counted)]
    try:
        wait_output(kafka, output, producing.total)
        with server.client() as c:
            for factor in (2, 4, 2, 1):  # 1 -> 2 -> 4 -> 2 -> 1
                assert c.post("/scale", json={"elasticityFactor": factor}).status_code == 202
                for _ in range(5):  # produce while the new version takes over
                    producing.send(100)
                    time.sleep(0.5)
                wait_output(kafka, output, producing.total)
                if factor == 4:  # every one of the 16 tasks works (the key hash is not
                    # the default partitioner's: with crc32 only 4 of them would)
                    producing.send(800)
                    done = wait_output(kafka, output, producing.total)
                    assert {r["task"] for r in done if r["task"].endswith("_4")} == {
                        f"Partition {p}_{b}_4" for p in range(4) for b in range(4)}
                    # the sampled counts reach the leader with the heartbeats after a batch
                    deadline = time.monotonic() + 60
                    while (judged := c.get("/status").json()["keyBuckets"])[
                            "partitionsJudged"] < 2:
                        assert time.monotonic() < deadline, judged
                        time.sleep(0.5)
                    assert judged["factor"] == 4, judged
                    assert judged["emptyBuckets"] == [] and judged["hotBuckets"] == [], judged
            # what the autosizer reads, in the heartbeats after the last batches
            wanted = {"batchSeconds", "recordsPerSecond", "consumerLag"}
            deadline = time.monotonic() + 60
            while True:
                stats = {p["processorId"]: p["stats"] or {}
                         for p in c.get("/status").json()["processors"]}
                if set(stats) == {"w0", "w1"} and all(wanted <= set(s)
                                                       for s in stats.values()):
                    break
                assert time.monotonic() < deadline, stats
                time.sleep(0.5)
    finally:
        stop_workers(workers)
    records = read_all(kafka, output)
    seen: dict[str, list[int]] = defaultdict(list)
    for r in records:
        seen[r["key"]].append(r["seq"])
    expected = {k: list(range(n)) for k, n in producing.seq.items()}
    assert {k: sorted(set(v)) for k, v in seen.items()} == expected  # nothing lost
    duplicates = sum(len(v) - len(set(v)) for v in seen.values())
    assert duplicates == 0, f"{duplicates} duplicates from scale changes"
    for key, seqs in seen.items():  # per key, in order
        assert seqs == sorted(seqs), (key, seqs[:20])
    versions = {r["version"] for r in records}
    assert len(versions) >= 5  # the work really moved through every job model
    for pid in ("w0", "w1"):  # one query per worker across 1 -> 2 -> 4 -> 2 -> 1
        assert queries_started(tmp_path, pid) == [1]


@pytest.mark.beside  # in the second process (tests/infra/beside.py)
def test_join_graceful_leave_and_kill_9(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path
) -> None:
    topic, output = new_topics(kafka, 4)
    producing = Producing(kafka, topic)
    producing.send(1000)
    server = coordinator_for(start_server, kafka, topic, "--partition-poll-interval-ms", "1000",
                             "--lease-ttl-ms", "6000", "--elasticity-factor", "2")
    workers = {f"w{i}": start_worker(tmp_path, server.url, kafka, output, f"w{i}")
               for i in range(2)}
    try:
        wait_output(kafka, output, producing.total)
        workers["w2"] = start_worker(tmp_path, server.url, kafka, output, "w2")  # joins
        for _ in range(6):
            producing.send(100)
            time.sleep(1)
        wait_output(kafka, output, producing.total)
        workers["w0"].send_signal(signal.SIGTERM)  # leaves gracefully
        for _ in range(4):
            producing.send(100)
            time.sleep(0.5)
        assert workers["w0"].wait(120) == 0
        wait_output(kafka, output, producing.total)
        before_kill = len(read_all(kafka, output))
        for _ in range(4):  # the victim is mid-run when it dies
            producing.send(100)
            time.sleep(0.3)
        crash(workers["w1"])  # kill -9
        producing.send(300)
        wait_output(kafka, output, producing.total)
    finally:
        stop_workers(list(workers.values()))
    records = read_all(kafka, output)
    duplicated = check_lost_and_order(records, producing)
    # duplicates only where the killed worker had processed without committing
    assert all(d["processor"] == "w1" for d in duplicated), duplicated[:5]
    # ... in its last batch(es): output after everything before the kill run-up, less
    # one batch's worth (--max-offsets-per-trigger 400)
    assert all(d["at"] >= before_kill - 400 for d in duplicated), duplicated[:5]
    assert {r["processor"] for r in records} == {"w0", "w1", "w2"}
    for pid in ("w0", "w1", "w2"):  # a join, a leave and a kill restart no query
        assert queries_started(tmp_path, pid) == [1]


@pytest.mark.parametrize("master", ["local[2]", "local[4]"])
def test_process_task_runs_per_virtual_task_in_offset_order(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path, master: str
) -> None:
    """8 tasks over 2 partitions: on 2 cores each partition's reader runs its 4 tasks; on
    4 each partition is read by two Spark tasks, each running 2 of its tasks
    (``task_reads.split_reads``), here on a 100 ms trigger."""
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(1500)
    server = coordinator_for(start_server, kafka, topic, "--elasticity-factor", "4")
    worker = start_worker(tmp_path, server.url, kafka, output, "w0", "--api", "task",
                          "--output-topic", output, "--spark-master", master,
                          "--log-level", "INFO,coxswain.worker.batches=DEBUG",
                          *(["--trigger-interval-ms", "100"] if master == "local[4]" else []))
    try:
        wait_output(kafka, output, producing.total)
        stats: dict[str, Any] = {}
        deadline = time.monotonic() + 30
        while "triggerSeconds" not in stats and time.monotonic() < deadline:
            time.sleep(0.2)  # (stats come with a heartbeat after a batch)
            found = httpx.get(f"{server.url}/status", timeout=10).json()["processors"]
            stats = found[0]["stats"] if found else {}
        assert stats.get("triggerSeconds") == (0.1 if master == "local[4]" else 0.25), stats
    finally:
        stop_workers([worker])
    records = read_all(kafka, output)
    per_key: dict[str, list[int]] = defaultdict(list)
    for r in records:
        per_key[r["key"]].append(r["seq"])
    assert per_key == {k: list(range(n)) for k, n in producing.seq.items()}  # exactly once
    tasks = {r["task"] for r in records}
    assert tasks == {f"Partition {p}_{b}_4" for p in range(2) for b in range(4)}
    for r in records:  # each record went to the virtual task of its key bucket
        assert r["task"].startswith(f"Partition {r['partition']}_")
    # the worker's INFO log is for people (#50): progress lines, version changes, and no
    # per-request HTTP lines, Spark progress bars or warnings a worker causes by design
    log = (tmp_path / "w0.log").read_text()
    split = re.findall(r"batch \d+: (\d+) ranges read by (\d+) Spark tasks", log)
    # (a batch of one partition's records alone is read by 4 Spark tasks)
    assert (bool(split) and {r for _, r in split} <= {"4"}) == (master == "local[4]"), split
    assert re.search(r"INFO coxswain.worker batch(?:es \d+-\d+| \d+): \d+ records for", log), log
    assert re.search(r"version \d+: starting Partition", log), log
    for noise in ("HTTP Request", "[Stage ", "falling behind", "resolves to a loopback",
                  "ResolveWriteToStream"):
        assert noise not in log, f"{noise!r} in the worker's log:\n{log[-3000:]}"
