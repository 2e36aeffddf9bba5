"""The chaos run: a whole deployment under random faults, then an independent check.

Real services, all started here and stopped by pid: a ZooKeeper ensemble of 3, PostgreSQL
(the checkpoint and metadata store), 3 coordinator replicas (leader-elected on
ZooKeeper), a Kafka broker, Spark workers (one PySpark application each) and a keyed
producer. For ``--minutes``, at random (seeded): kill -9 a worker (it restarts at once
with the same processor id and location), kill -9 the leader replica (restarted a few
seconds later) or SIGSTOP it (SIGCONT after ``--stop-leader-s``), restart a ZooKeeper
member, stop PostgreSQL for ``--pg-outage-s``; and every ``--scale-every-s`` an
elasticity factor change. Then everything is brought back, the producer stops, the
output is drained and checked by a reader that shares nothing with the workers:

* lost: produced (key, seq) pairs never output: must be 0;
* order violations: per key, first outputs in a sequence other than 0, 1, 2...: 0;
* duplicates whose first output came from a worker process that was not killed -9
  (a killed worker's uncommitted batch is the only allowed cause): 0;
* job model versions seen by each replica never go backwards; the last version's
  barrier completes;
* how many faults of each kind were injected.

Run: .venv/bin/python -m bench.chaos [--minutes 10] [--workers 3] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Producer
from pyspark.sql import DataFrame

from service.local.kafka import LocalKafka
from service.local.orders import create_topics, read_json_records
from service.local.ports import kill_process_group, stop_process_group
from service.local.zookeeper import ZooKeeperEnsemble
from tests.infra.postgres import PostgresServer
from tests.service.server import Server

log = logging.getLogger("coxswain.chaos")
FAULTS = ("kill_worker", "kill_leader", "stop_leader", "restart_zookeeper", "stop_postgres")
FACTORS = (2, 4, 2, 1)


def record_with_pid(df: DataFrame, ctx: Any) -> None:
    """process_batch: (key, seq, processor, pid, version) of every record, to $OUTPUT_TOPIC;
    the pid names the worker process (incarnation) that wrote it."""
    rows = df.select("key", "value", "partition", "offset").orderBy(
        "partition", "offset").collect()
    producer = Producer({"bootstrap.servers": os.environ["KAFKA_BOOTSTRAP"], "acks": "all",
                         "enable.idempotence": True, "log_level": 2})
    for r in rows:
        producer.produce(os.environ["OUTPUT_TOPIC"], key=r["key"], value=json.dumps({
            "key": r["key"].decode(), "seq": int(r["value"]), "processor": ctx.processor_id,
            "pid": os.getpid(), "version": ctx.version}).encode())
    producer.flush(60)


@dataclass
class ChaosConfig:
    """What the run does."""

    seconds: float = 600.0
    workers: int = 3
    partitions: int = 4
    keys: int = 500
    rate: float = 100.0  # records/s
    gap_s: tuple[float, float] = (6.0, 15.0)  # between faults
    scale_every_s: float = 30.0
    pg_outage_s: float = 15.0
    stop_leader_s: float = 8.0
    restart_after_s: float = 3.0  # a killed replica or a ZooKeeper member comes back
    lease_ttl_ms: int = 10_000
    seed: int = 1
    every_fault_once: bool = False  # a short run: each kind at least once, in random order


@dataclass
class ChaosReport:
    """What the independent check found."""

    produced: int = 0
    output_records: int = 0
    lost: int = 0
    order_violations: int = 0
    duplicates: int = 0
    unexplained_duplicates: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    factor_changes: int = 0
    versions_backwards: list[str] = field(default_factory=list)
    final_version: int = 0
    final_barrier: str = ""
    worker_exits: list[str] = field(default_factory=list)  # not caused by a kill -9
    drain_seconds: float = 0.0
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.order_violations == 0
                and self.unexplained_duplicates == 0 and not self.versions_backwards
                and self.final_barrier == "done" and not self.worker_exits)

    def lines(self) -> list[str]:
        return [
            f"produced {self.produced}, output {self.output_records} records",
            f"lost {self.lost}, per-key order violations {self.order_violations}",
            f"duplicates {self.duplicates} (not from a killed worker: "
            f"{self.unexplained_duplicates})",
            "faults: " + ", ".join(f"{k} {self.faults[k]}" for k in FAULTS)
            + f"; factor changes {self.factor_changes}",
            f"versions backwards: {self.versions_backwards or 'none'}; last version "
            f"{self.final_version}, barrier {self.final_barrier}",
            f"workers that exited on their own: {self.worker_exits or 'none'}",
            f"drained in {self.drain_seconds:.0f}s",
            *self.examples[:10],
        ]


class KeyedProducer:
    """Produces keyed records at a steady rate in a thread; each key's value counts up."""

    def __init__(self, bootstrap: str, topic: str, keys: int, rate: float) -> None:
        self._p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 2,
                            "enable.idempotence": True, "partitioner": "murmur2_random"})
        self._topic, self._keys, self._rate = topic, keys, rate
        self.seq: dict[str, int] = defaultdict(int)
        self.total = 0
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
                self._p.produce(self._topic, key=key.encode(), value=str(self.seq[key]).encode())
                self.seq[key] += 1
                self.total += 1
            self._p.poll(0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self._p.flush(60):
            raise RuntimeError("the producer could not deliver every record")


class Deployment:
    """Every process of the run, each stopped by pid."""

    def __init__(self, root: Path, config: ChaosConfig, kafka: LocalKafka | None = None,
                 pg: PostgresServer | None = None) -> None:
        """``kafka``, ``pg``: servers shared with the caller (a test session), used but
        not stopped; others are started and stopped here."""
        self.root, self.config = root, config
        self._own_kafka, self._own_pg = kafka is None, pg is None
        self.zk = ZooKeeperEnsemble.start(3)
        self.pg = pg or PostgresServer.start()
        self.store_url = self.pg.create_database()
        self.kafka = kafka or LocalKafka.create().start()
        self.topic, self.output = (f"chaos-in-{uuid.uuid4().hex[:6]}",
                                   f"chaos-out-{uuid.uuid4().hex[:6]}")
        create_topics(self.kafka.bootstrap, [(self.topic, config.partitions),
                                              (self.output, 1)])
        job = f"chaos-{uuid.uuid4().hex[:6]}"
        self.replicas = [Server(root / f"r{i}", [
            "--zk", self.zk.connect_string, "--job", job, "--store", self.store_url,
            "--replica-id", f"r{i}", "--kafka-bootstrap", self.kafka.bootstrap,
            "--input", f"kafka.{self.topic}", "--debounce-ms", "500",
            "--lease-ttl-ms", str(config.lease_ttl_ms), "--barrier-timeout-ms", "30000",
            "--partition-poll-interval-ms", "2000", "--zk-session-timeout-ms", "6000",
            "--max-elasticity-factor", "8"]) for i in range(3)]
        for r in self.replicas:
            r.start(timeout_s=60)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.killed_pids: set[int] = set()
        self.stopped: set[int] = set()  # replicas under SIGSTOP

    @property
    def urls(self) -> str:
        return ",".join(r.url for r in self.replicas)

    def start_worker(self, pid: str) -> None:
        self.workers[pid] = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker", "--coordinator", self.urls,
             "--app", "bench.chaos:record_with_pid", "--kafka-bootstrap",
             self.kafka.bootstrap, "--processor-id", pid, "--location", f"host-{pid}",
             "--spark-master", "local[1]", "--max-offsets-per-trigger", "2000"],
            stdout=(self.root / f"{pid}.log").open("ab"), stderr=subprocess.STDOUT,
            env={**os.environ, "KAFKA_BOOTSTRAP": self.kafka.bootstrap,
                 "OUTPUT_TOPIC": self.output},
            start_new_session=True)  # its JVM in its process group

    def live_replicas(self) -> list[int]:
        return [i for i, r in enumerate(self.replicas)
                if r.proc is not None and r.proc.poll() is None and i not in self.stopped]

    def get(self, path: str) -> dict[str, Any] | None:
        """``path`` from the first replica that answers."""
        for i in self.live_replicas():
            try:
                r = httpx.get(self.replicas[i].url + path, timeout=5)
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                return dict(r.json())
        return None

    def leader(self) -> int | None:
        st = self.get("/status")
        leader = st.get("leaderId") if st else None
        return int(str(leader).removeprefix("r")) if leader else None

    def close(self) -> None:
        for i in list(self.stopped):
            self.resume_replica(i)
        for w in self.workers.values():
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in self.workers.values():
            stop_process_group(w, grace_s=60)
        for r in self.replicas:
            r.stop()
        if self._own_kafka:
            self.kafka.destroy()
        if self._own_pg:
            self.pg.stop()
        elif self.pg.proc is None or self.pg.proc.poll() is not None:
            self.pg.resume()  # running again for the caller, even after a failed run
        self.zk.stop()

    def resume_replica(self, i: int) -> None:
        proc = self.replicas[i].proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
        self.stopped.discard(i)


class Chaos:
    """Injects the faults and watches the versions while the job runs."""

    def __init__(self, d: Deployment, config: ChaosConfig, report: ChaosReport) -> None:
        self.d, self.config, self.report = d, config, report
        self.rng = random.Random(config.seed)
        self.seen: dict[int, int] = {}  # replica -> highest version it reported
        self._stop = threading.Event()

    def watch_versions(self) -> None:
        while not self._stop.wait(0.5):
            for i in self.d.live_replicas():
                try:
                    st = httpx.get(self.d.replicas[i].url + "/status", timeout=2).json()
                except (httpx.HTTPError, ValueError):
                    continue
                version = st.get("latestVersion")
                if not isinstance(version, int):
                    continue
                if version < self.seen.get(i, -1):
                    self.report.versions_backwards.append(
                        f"r{i}: {self.seen[i]} then {version}")
                self.seen[i] = max(version, self.seen.get(i, -1))

    def scale(self) -> None:
        n = 0
        while not self._stop.wait(self.config.scale_every_s):
            factor = FACTORS[n % len(FACTORS)]
            for i in self.d.live_replicas():
                try:
                    r = httpx.post(self.d.replicas[i].url + "/scale",
                                   json={"elasticityFactor": factor}, timeout=10)
                except httpx.HTTPError:
                    continue
                if r.status_code == 202:
                    self.report.factor_changes += 1
                    n += 1
                    log.info("elasticity factor -> %d", factor)
                    break

    def inject(self, kind: str) -> None:
        d, c = self.d, self.config
        if kind == "kill_worker":
            pid = self.rng.choice(sorted(d.workers))
            proc = d.workers[pid]
            d.killed_pids.add(proc.pid)
            kill_process_group(proc.pid)  # the worker and its JVM, as a host crash would
            proc.wait(30)
            d.start_worker(pid)
        elif kind in ("kill_leader", "stop_leader"):
            leader = d.leader()
            if leader is None:
                return
            server = d.replicas[leader]
            if kind == "kill_leader":
                server.kill()
                time.sleep(c.restart_after_s)
                server.start(timeout_s=60)
            else:
                assert server.proc is not None
                d.stopped.add(leader)
                server.proc.send_signal(signal.SIGSTOP)
                time.sleep(c.stop_leader_s)
                d.resume_replica(leader)
        elif kind == "restart_zookeeper":
            sid = self.rng.choice([m.sid for m in d.zk.members])
            d.zk.stop_member(sid, signal.SIGKILL)
            time.sleep(c.restart_after_s)
            d.zk.start_member(sid)
        elif kind == "stop_postgres":
            d.pg.pause()
            time.sleep(c.pg_outage_s)
            d.pg.resume()
        self.report.faults[kind] += 1
        log.info("fault injected: %s", kind)

    def run(self, seconds: float) -> None:
        threads = [threading.Thread(target=self.watch_versions, daemon=True),
                   threading.Thread(target=self.scale, daemon=True)]
        for t in threads:
            t.start()
        end = time.monotonic() + seconds
        queue = list(FAULTS) if self.config.every_fault_once else []
        self.rng.shuffle(queue)
        try:
            while time.monotonic() < end:
                time.sleep(self.rng.uniform(*self.config.gap_s))
                if time.monotonic() >= end and not queue:
                    break
                self.inject(queue.pop() if queue else self.rng.choice(FAULTS))
        finally:
            self._stop.set()
            for t in threads:
                t.join(30)


def check(records: list[dict[str, Any]], produced: dict[str, int], killed: set[int],
          report: ChaosReport) -> None:
    """The independent reader's verdict (fills ``report``)."""
    first: dict[tuple[str, int], dict[str, Any]] = {}
    per_key: dict[str, list[int]] = defaultdict(list)
    for r in records:
        k = (r["key"], r["seq"])
        if k in first:
            report.duplicates += 1
            if first[k]["pid"] not in killed:
                report.unexplained_duplicates += 1
                report.examples.append(f"duplicate {k}: first by {first[k]}, again by {r}")
            continue
        first[k] = r
        per_key[r["key"]].append(r["seq"])
    report.output_records = len(records)
    report.produced = sum(produced.values())
    for key, n in produced.items():
        seqs = per_key.get(key, [])
        report.lost += n - len(set(seqs) & set(range(n)))
        if seqs != sorted(seqs):
            report.order_violations += 1
            report.examples.append(f"order {key}: {seqs[:20]}")


def run(config: ChaosConfig, root: Path, progress: Callable[[str], None] = print,
        kafka: LocalKafka | None = None, pg: PostgresServer | None = None) -> ChaosReport:
    """One chaos run; returns the independent check's report."""
    report = ChaosReport()
    d = Deployment(root, config, kafka, pg)
    try:
        producer = KeyedProducer(d.kafka.bootstrap, d.topic, config.keys, config.rate)
        for i in range(config.workers):
            d.start_worker(f"w{i}")
        producer.start()
        progress(f"deployment up; faults for {config.seconds:.0f}s (seed {config.seed})")
        Chaos(d, config, report).run(config.seconds)
        for i in list(d.stopped):
            d.resume_replica(i)
        for r in d.replicas:
            if r.proc is None or r.proc.poll() is not None:
                r.start(timeout_s=60)
        producer.stop()
        progress(f"faults over ({dict(report.faults)}); draining {producer.total} records")
        started = time.monotonic()
        deadline = started + 300
        expected = {(k, s) for k, n in producer.seq.items() for s in range(n)}
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
        while time.monotonic() < deadline:
            model = d.get("/jobmodel")
            if model is not None:
                report.final_version, report.final_barrier = model["version"], model["barrier"]
                if model["barrier"] == "done":
                    break
            time.sleep(1)
        check(records, dict(producer.seq), d.killed_pids, report)
        return report
    finally:
        d.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--keep", action="store_true", help="keep the logs folder")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per status poll
    config = ChaosConfig(seconds=args.minutes * 60, workers=args.workers, seed=args.seed)
    root = Path(tempfile.mkdtemp(prefix="coxswain-chaos-"))
    print(f"load average {os.getloadavg()[0]:.2f} at start; logs in {root}", flush=True)
    started = time.monotonic()
    report = run(config, root, lambda s: print(s, flush=True))
    for line in report.lines():
        print(line)
    print(f"{(time.monotonic() - started) / 60:.1f} min in all; load average "
          f"{os.getloadavg()[0]:.2f} at end; {'PASS' if report.ok else 'FAIL'}")
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
