"""Exactly-once output's cost (issue #28): one worker with and without --exactly-once, in
the same session, alternating runs.

* **Throughput**: records/s of one worker (``local[2]``) draining a backlog (Spark's
  start excluded: from the first tenth of the output to its last record), read by a
  read_committed reader, on a 0-work job (``tests.worker.apps:echo_task``) and on
  bench/elasticity.py's job (2 ms of waiting per record), factor 1 and 4.
* **Latency**: records fed at a quiet rate; per record, the seconds from its production to
  its output reaching a read_committed reader (exactly-once output is visible at its
  commit, at-least-once output as it is written), median and 95th percentile.

    .venv/bin/python -m bench.exactly_once [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench.handover import Rig, produce, wait
from service.local.kafka import LocalKafka
from service.local.orders import create_topics
from tests.service.server import Server

ROOT = Path(__file__).resolve().parents[1]
APPS = {"0-work": "tests.worker.apps:echo_task", "2 ms": "bench.elasticity:slow_task"}
QUIET_RATE = 200.0  # records/s in the latency runs


class Committed:
    """Tails an output topic as a read_committed reader: (arrival time, record)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.seen: list[tuple[float, dict[str, Any]]] = []
        self._stop = threading.Event()
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                                   "isolation.level": "read_committed", "log_level": 2})
        self._consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._consumer.consume(2000, 0.1):
                if m.error() is None:
                    self.seen.append((time.time(), json.loads(m.value() or b"{}")))
        self._consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _worker_args(eo: bool) -> tuple[str, ...]:
    return ("--spark-master", "local[2]", *(("--exactly-once",) if eo else ()))


def throughput(kafka: LocalKafka, root: Path, app: str, factor: int, eo: bool) -> float:
    """Records/s of one worker draining a backlog, as a read_committed reader sees it."""
    topic, output = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
    n = 100_000 if app == "0-work" else 8_000
    create_topics(kafka.bootstrap, [(topic, 2), (output, 1)])
    produce(kafka, topic, n)
    work = root / f"rate-{uuid.uuid4().hex[:6]}"
    work.mkdir()
    rig = Rig(work, kafka, ROOT, extra=_worker_args(eo))
    out = Committed(kafka.bootstrap, output)
    try:
        rig.server = Server(work, ["--kafka-bootstrap", kafka.bootstrap, "--input",
                                   f"kafka.{topic}", "--elasticity-factor", str(factor),
                                   "--debounce-ms", "200"]).start()
        rig.worker("w0", APPS[app], output, limit=1_000_000)
        wait(lambda: len(out.seen) >= n, 900, f"{n} records out")
        times = sorted(t for t, _ in out.seen)
        lo, hi = times[n // 10], times[n - 1]
        return (n - n // 10 - 1) / max(1e-9, hi - lo)
    finally:
        out.stop()
        rig.close()


def latency(kafka: LocalKafka, root: Path, eo: bool, seconds: float = 30.0
            ) -> tuple[float, float]:
    """Median and 95th percentile seconds from a record's production to its output at a
    read_committed reader, records fed at :data:`QUIET_RATE`."""
    topic, output = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
    create_topics(kafka.bootstrap, [(topic, 2), (output, 1)])
    work = root / f"lat-{uuid.uuid4().hex[:6]}"
    work.mkdir()
    rig = Rig(work, kafka, ROOT, extra=_worker_args(eo))
    out = Committed(kafka.bootstrap, output)
    sent: dict[tuple[str, int], float] = {}
    try:
        rig.server = Server(work, ["--kafka-bootstrap", kafka.bootstrap, "--input",
                                   f"kafka.{topic}", "--debounce-ms", "200"]).start()
        rig.worker("w0", APPS["0-work"], output)
        p = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 0, "log_level": 2})
        p.produce(topic, key=b"warm", value=b"0")  # the first batch: Spark warming up
        p.flush()
        wait(lambda: len(out.seen) >= 1, 300, "the first record out")
        started, i = time.time(), 0
        while time.time() - started < seconds:
            key = f"k{i % 500}"
            seq = i // 500
            p.produce(topic, key=key.encode(), value=str(seq).encode())
            sent[(key, seq)] = time.time()
            i += 1
            p.poll(0)
            time.sleep(1 / QUIET_RATE)
        p.flush()
        wait(lambda: len(out.seen) >= len(sent) + 1, 120, "every record out")
        took = sorted(t - sent[(r["key"], r["seq"])] for t, r in out.seen
                      if (r["key"], r["seq"]) in sent)
        return statistics.median(took), took[int(len(took) * 0.95)]
    finally:
        out.stop()
        rig.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--only", default="", help="throughput, latency (default: both)")
    args = p.parse_args()
    only = set(filter(None, args.only.split(",")))
    print(f"load average before: {os.getloadavg()}", flush=True)
    kafka = LocalKafka.create().start()
    root = Path(tempfile.mkdtemp(prefix="bench-eo-"))
    rates: dict[tuple[str, int, bool], list[float]] = {}
    try:
        if not only or "throughput" in only:
            for app, factor in (("0-work", 1), ("2 ms", 1), ("2 ms", 4)):
                for _ in range(args.runs):
                    for eo in (False, True):
                        rate = throughput(kafka, root, app, factor, eo)
                        rates.setdefault((app, factor, eo), []).append(rate)
                        print(json.dumps({"job": app, "factor": factor, "exactlyOnce": eo,
                                          "recordsPerSecond": round(rate)}), flush=True)
        if not only or "latency" in only:
            for _ in range(args.runs):
                for eo in (False, True):
                    median, p95 = latency(kafka, root, eo)
                    print(json.dumps({"latency": "0-work", "exactlyOnce": eo,
                                      "medianS": round(median, 3), "p95S": round(p95, 3)}),
                          flush=True)
    finally:
        kafka.destroy()
    for (app, factor, eo), found in sorted(rates.items()):
        if eo:
            base = statistics.median(rates[(app, factor, False)])
            print(f"  {app:7s} F={factor}: exactly-once {statistics.median(found):,.0f} "
                  f"records/s against {base:,.0f}: {statistics.median(found) / base:.2f}x")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
