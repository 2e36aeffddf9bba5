"""The chaos run: a whole deployment under random faults, then an independent check.

Real services, all started here and stopped by pid (``bench.chaos.deployment``): a
ZooKeeper ensemble of 3, PostgreSQL (the checkpoint and metadata store), 3 coordinator
replicas (leader-elected on ZooKeeper), a Kafka broker, Spark workers (one PySpark
application each) and a keyed producer. For ``--minutes``, at random (seeded,
``bench.chaos.faults``): kill -9 a worker (it restarts at once with the same processor id
and location), kill -9 the leader replica (restarted a few seconds later) or SIGSTOP it,
restart a ZooKeeper member, stop PostgreSQL; and every 30 s an elasticity factor change.

``--stateful``: the counting app (per-key state, one standby per task, the blob store on
an S3 API server), every replica and worker in a network namespace of its own, and four
more faults on real links: the blob store unreachable for every worker for 20 s, a
worker cut from the coordinators for longer than its lease (it must come back by
itself), the leader replica cut from ZooKeeper for longer than its session, a worker cut
from the blob store while it commits.

``--stateful --exactly-once``: the workers write their output and checkpoints in Kafka
transactions (``coxswain worker --exactly-once``) and the reader reads committed output
only: then no duplicate at all is allowed, whatever the fault, the leader's failovers
included.

Then everything is brought back, the producer stops, the output is drained and checked
by a reader that shares nothing with the workers (``bench.chaos.check``):

* lost: produced (key, seq) pairs never output: must be 0;
* order violations: per key, first outputs in a sequence other than 0, 1, 2...: 0;
* duplicates whose first output came from a worker process no fault hit (a killed or
  partitioned worker's uncommitted batch is the only allowed cause): 0;
* stateful: every output record, duplicates included, has count == seq + 1;
* job model versions seen by each replica never go backwards; the last version's
  barrier completes, with every worker in it; no worker exited on its own;
* per kind of fault: how long output stopped and the duplicates it left.

Run: .venv/bin/python -m bench.chaos [--minutes 10] [--workers 3] [--seed N] [--stateful
[--exactly-once]] (``--stateful`` needs root: network namespaces.)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from bench.chaos.check import check
from bench.chaos.config import ChaosConfig, ChaosReport
from bench.chaos.deployment import Deployment
from bench.chaos.faults import Chaos
from bench.chaos.trace import alarms, trace_lost
from service.local.kafka import LocalKafka
from service.local.orders import read_json_records
from service.local.s3 import LocalS3
from tests.infra.postgres import PostgresServer

log = logging.getLogger("coxswain.chaos")


class KeyedProducer:
    """Produces keyed records at a steady rate in a thread; each key's value counts up."""

    def __init__(self, bootstrap: str, topic: str, keys: int, rate: float) -> None:
        self._p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 2,
                            "enable.idempotence": True})
        self._topic, self._keys, self._rate = topic, keys, rate
        self.seq: dict[str, int] = defaultdict(int)
        self.total = 0
        self.failed: list[str] = []  # delivery reports' errors
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        tick = 0.1
        per_tick = max(1, round(self._rate * tick))
        while not self._stop.wait(tick):
            for _ in range(per_tick):
                key = f"key-{self.total * 7919 % self._keys}"
                self._p.produce(self._topic, key=key.encode(), value=str(self.seq[key]).encode(),
                                on_delivery=self._delivered)
                self.seq[key] += 1
                self.total += 1
            self._p.poll(0)

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(f"{msg.key()!r}={msg.value()!r}: {err}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self._p.flush(60):
            raise RuntimeError("the producer could not deliver every record")


def read_input(bootstrap: str, topic: str, partitions: int) -> dict[str, list[int]]:
    """Per key, the seqs of its records in ``topic`` in order (a key is in one partition):
    what the job was given, read back rather than taken from the producer's counters."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "enable.partition.eof": True, "log_level": 2,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: dict[str, list[int]] = defaultdict(list)
    ended: set[int] = set()
    try:
        while len(ended) < partitions:
            msg = consumer.poll(10)
            if msg is None:
                raise RuntimeError(f"the input topic {topic} stopped answering")
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    ended.add(int(msg.partition() or 0))
                    continue
                raise RuntimeError(f"reading the input back: {error}")
            out[(msg.key() or b"").decode()].append(int(msg.value() or b"-1"))
    finally:
        consumer.close()
    return dict(out)


def run(config: ChaosConfig, root: Path, progress: Callable[[str], None] = print,
        kafka: LocalKafka | None = None, pg: PostgresServer | None = None,
        s3: LocalS3 | None = None) -> ChaosReport:
    """One chaos run; returns the independent check's report."""
    if config.exactly_once and not config.stateful:
        raise ValueError("an exactly-once chaos run is a stateful one (its app writes "
                         "through process_task)")
    report = ChaosReport(kinds=config.faults, exactly_once=config.exactly_once)
    d = Deployment(root, config, kafka, pg, s3)
    try:
        producer = KeyedProducer(d.kafka.bootstrap, d.topic, config.keys, config.rate)
        for i in range(config.workers):
            d.start_worker(f"w{i}")
        producer.start()
        progress(f"deployment up; faults for {config.seconds:.0f}s (seed {config.seed})")
        faults_from = time.time()
        Chaos(d, config, report).run(config.seconds)
        for i in list(d.stopped):
            d.resume_replica(i)
        d.restore_links()
        for r in d.replicas:
            if r.proc is None or r.proc.poll() is not None:
                r.start(timeout_s=60)
        producer.stop()
        progress(f"faults over ({dict(report.faults)}); draining {producer.total} records")
        started = time.monotonic()
        deadline = started + 300
        if producer.failed:
            progress(f"the producer failed to deliver {len(producer.failed)} records: "
                     f"{producer.failed[:3]}")
        produced = read_input(d.kafka.bootstrap, d.topic, config.partitions)
        report.undelivered = producer.total - sum(len(v) for v in produced.values())
        expected = {(k, s) for k, seqs in produced.items() for s in seqs}
        records: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            records = read_json_records(d.kafka.bootstrap, d.output, idle_s=10)
            if expected <= {(r["key"], r["seq"]) for r in records}:
                break
            time.sleep(3)
        report.drain_seconds = time.monotonic() - started
        for pid, w in d.workers.items():
            if w.poll() is not None:
                report.worker_exits.append(f"{pid} exited {w.returncode}")
        deadline = time.monotonic() + 90
        model: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            model = d.get("/jobmodel")
            if model is not None:
                report.final_version, report.final_barrier = model["version"], model["barrier"]
                if model["barrier"] == "done" and set(model["containers"]) == set(d.workers):
                    break  # every worker back in the job (the partitioned one by itself)
            time.sleep(1)
        if model is not None and set(model["containers"]) != set(d.workers):
            report.worker_exits.append(f"not in the last job model: "
                                       f"{sorted(set(d.workers) - set(model['containers']))}")
        check(records, produced, d.killed_pids, report, config.stateful)
        report.slipped, report.dropped_reports = alarms(root)
        if report.lost:
            report.trace = trace_lost(root, report.lost_around, report.costs, faults_from)
        return report
    finally:
        d.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--stateful", action="store_true",
                        help="the counting app with state, standbys and an S3 blob store, "
                             "and network faults (needs root)")
    parser.add_argument("--exactly-once", action="store_true",
                        help="with --stateful: workers with --exactly-once, the output "
                             "read committed, no duplicate allowed")
    args = parser.parse_args()
    if args.exactly_once and not args.stateful:
        parser.error("--exactly-once needs --stateful")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per status poll
    config = ChaosConfig(seconds=args.minutes * 60, workers=args.workers, seed=args.seed,
                         stateful=args.stateful, exactly_once=args.exactly_once)
    root = Path(tempfile.mkdtemp(prefix="coxswain-chaos-"))
    print(f"load average {os.getloadavg()[0]:.2f} at start; logs in {root}", flush=True)
    started = time.monotonic()
    report = run(config, root, lambda s: print(s, flush=True))
    for line in report.lines():
        print(line)
    print(f"{(time.monotonic() - started) / 60:.1f} min in all; load average "
          f"{os.getloadavg()[0]:.2f} at end; {'PASS' if report.ok else 'FAIL'}")
    sys.exit(0 if report.ok else 1)
