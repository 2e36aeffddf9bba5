"""``coxswain demo``: the whole system on one machine, scaling while it runs.

Starts a local KRaft Kafka broker, an embedded coordinator (SQLite) and two Spark workers
(``worker.demo_app``), produces orders keyed by customer at a steady rate, scales the
elasticity factor 1 -> 4 -> 2 while they run, and redraws a table of processors, tasks,
lag and throughput. A reader of the output topic checks that every order came out and
that each customer's orders came out in order. With ``stateful``, the workers keep a
running total and order count per customer in their task state (``--stateful``, backed
up to a folder), the table shows each task's state size, and the check includes every
output record's total and count, through each split and merge of the state. Everything it
started is stopped (by pid) at the end, on Ctrl-C, or on SIGTERM.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import httpx
from confluent_kafka import Consumer, TopicPartition

from common.kafka_clients import plain
from service.local.kafka import LocalKafka
from service.local.orders import amount_cents, create_topics, produce_orders
from service.local.ports import free_port, stop_process_group, wait_until_answering

INPUT_TOPIC = "demo-orders"
OUTPUT_TOPIC = "demo-orders-processed"


@dataclass(frozen=True)
class DemoPlan:
    """What the demo does: its input, its load and its scaling script."""

    partitions: int = 4
    keys: int = 2000
    rate: int = 200  # orders per second
    factors: tuple[int, ...] = (1, 4, 2)
    stage_s: float = 30.0
    refresh_s: float = 2.0
    workers: int = 2
    spark_master: str = "local[2]"
    start_timeout_s: float = 240.0
    drain_timeout_s: float = 120.0
    stateful: bool = False  # a running total per customer in task state


#: without a terminal the table goes to a log: written when the stage changes and at
#: most this often within a stage (every refresh printed 1 025 lines in a run)
LOG_TABLE_EVERY_S = 30.0


@dataclass
class OrderCheck:
    """What came out of the output topic: distinct orders, duplicates, and per-key order
    violations (a sequence number arriving after a higher one of the same key)."""

    seen: set[tuple[str, int]] = field(default_factory=set)
    last: dict[str, int] = field(default_factory=dict)
    duplicates: int = 0
    violations: int = 0
    wrong_totals: int = 0  # stateful: a count or total that is not exactly its orders'
    _totals: dict[str, list[int]] = field(default_factory=dict)  # key -> running totals

    def add(self, key: str, seq: int, orders: int | None = None,
            total_cents: int | None = None) -> None:
        """Record one output record (with the running count and total of a stateful
        run: they must be those of exactly the customer's orders 0..seq)."""
        if total_cents is not None and (orders != seq + 1
                                        or total_cents != self._total(key, seq)):
            self.wrong_totals += 1
        if (key, seq) in self.seen:
            self.duplicates += 1
            return
        self.seen.add((key, seq))
        if seq < self.last.get(key, -1):
            self.violations += 1
        self.last[key] = max(self.last.get(key, -1), seq)

    def _total(self, key: str, seq: int) -> int:
        totals = self._totals.setdefault(key, [])
        while len(totals) <= seq:
            totals.append((totals[-1] if totals else 0) + amount_cents(key, len(totals)))
        return totals[seq]

    @property
    def distinct(self) -> int:
        """Orders seen at least once."""
        return len(self.seen)


def partition_lag(lags: dict[str, Any]) -> int:
    """A processor's records behind, from its tasks' lags: each key bucket of a partition
    reports the partition's lag, so they are counted once per partition (summed over
    the tasks, a factor of 4 showed the backlog four times over)."""
    per_partition: dict[str, int] = {}
    for task, lag in lags.items():
        partition = re.sub(r"_\d+_\d+$", "", str(task))  # "Partition 0_1_4" -> "Partition 0"
        per_partition[partition] = max(per_partition.get(partition, 0), int(lag))
    return sum(per_partition.values())


def render(status: dict[str, Any], stage: str, elapsed_s: float, produced: int,
           check: OrderCheck) -> str:
    """The live table: one header line about the job, one row per processor."""
    lines = [
        f"coxswain demo  {elapsed_s:5.0f}s  {stage}",
        f"job model v{status.get('latestVersion')} (barrier {status.get('barrier')}, "
        f"active v{status.get('activeVersion')})  elasticity factor "
        f"{status.get('elasticityFactor')}  last rebalance: "
        f"{(status.get('lastRebalance') or {}).get('reason', '-')}",
        f"orders produced {produced:,}  processed {check.distinct:,}  "
        f"duplicates {check.duplicates}  per-key order violations {check.violations}"
        + (f"  wrong totals {check.wrong_totals}" if check.wrong_totals else ""),
        "",
    ]
    rows = [("PROCESSOR", "LOCATION", "TASKS", "RECORDS/S", "BATCH S", "LAG", "ON VERSION")]
    for p in status.get("processors", []):
        stats = p.get("stats") or {}
        lag = partition_lag(stats.get("consumerLag") or {})
        rows.append((p["processorId"], p["locationId"], str(p["activeTasks"]),
                     f"{stats.get('recordsPerSecond', 0):,.0f}",
                     f"{stats.get('batchSeconds', 0):.2f}", f"{lag:,}",
                     str(stats.get("version", "-"))))
    lines += _columns(rows)
    state = sorted((task, p["processorId"], int(size))
                   for p in status.get("processors", [])
                   for task, size in ((p.get("stats") or {}).get("stateBytes") or {}).items())
    if state:
        lines += ["", f"state: {sum(n for _, _, n in state) / 1e6:,.1f} MB in "
                      f"{len(state)} tasks"]
        lines += _columns([("TASK", "PROCESSOR", "STATE KB"),
                           *((t, pid, f"{n / 1e3:,.0f}") for t, pid, n in state)])
    return "\n".join(lines)


def _settled(status: dict[str, Any], factor: int, plan: DemoPlan) -> bool:
    """The factor is in effect: the latest version has it, its barrier is done, and every
    worker's last batch ran under it."""
    processors = status.get("processors", [])
    return (status.get("elasticityFactor") == factor and status.get("barrier") == "done"
            and status.get("latestVersion") == status.get("activeVersion")
            and len(processors) == plan.workers
            and all((p.get("stats") or {}).get("version") == status.get("latestVersion")
                    for p in processors))


def _columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]


class Demo:
    """Runs one demo; :meth:`run` returns the process exit code."""

    def __init__(self, plan: DemoPlan, out: TextIO = sys.stdout,
                 work_dir: Path | None = None) -> None:
        self.plan = plan
        self._out = out
        self._live = out.isatty()
        self._own_dir = work_dir is None
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="coxswain-demo-"))
        self._stop = threading.Event()
        self._producing = threading.Event()
        self._produced_all = threading.Event()  # the producer stopped and flushed
        self.produced = 0
        self.check = OrderCheck()
        self._check_lock = threading.Lock()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}  # by name, in start order
        self._events: list[str] = []
        self._started = time.monotonic()
        self._shown = ("", 0.0)  # (stage, when) the table was last written (no terminal)
        # per elasticity factor stage: the workers' summed batch rates seen
        self._rates: dict[str, list[float]] = {}

    # -- the script

    def run(self) -> int:
        """Start everything, run the scaling script, stop everything; 0 when every order
        came out once or more and in per-key order."""
        signal.signal(signal.SIGTERM, lambda *_: self._stop.set())
        kafka: LocalKafka | None = None
        threads: list[threading.Thread] = []
        ok = False
        try:
            self._say(f"work folder (logs): {self.work_dir}")
            self._say("starting Kafka (KRaft, local jars)...")
            kafka = LocalKafka.create(self.work_dir / "kafka").start()
            self._say(f"started pid {kafka.proc.pid if kafka.proc else '?'}: Kafka at "
                      f"{kafka.bootstrap}")
            self._topics(kafka.bootstrap)
            url = self._coordinator(kafka.bootstrap)
            self._say(f"coordinator at {url}; starting {self.plan.workers} Spark workers...")
            for i in range(1, self.plan.workers + 1):
                self._worker(url, kafka.bootstrap, i)
            threads = [threading.Thread(target=self._produce, args=(kafka.bootstrap,),
                                        daemon=True),
                       threading.Thread(target=self._consume, args=(kafka.bootstrap,),
                                        daemon=True)]
            self._producing.set()
            for t in threads:
                t.start()
            with httpx.Client(base_url=url, timeout=10) as api:
                ok = self._script(api)
        except KeyboardInterrupt:
            self._say("interrupted")
        finally:
            self._stop.set()
            self._say("stopping workers, coordinator and Kafka...")
            # workers first, all at once, while the coordinator still takes their leave;
            # then the coordinator (the first process started)
            started = list(self._procs.values())
            workers = started[1:]
            for proc in workers:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in [*workers, *started[:1]]:
                stop_process_group(proc, grace_s=30)  # a worker's Spark JVM too
            for t in threads:
                t.join(15)
            if kafka is not None:
                kafka.stop()
            self._say("stopped")
        if ok and self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        elif not ok:
            self._say(f"logs kept in {self.work_dir}")
        return 0 if ok else 1

    def _script(self, api: httpx.Client) -> bool:
        if not self._wait_until(
                "workers starting (Spark, then the first job model)", api,
                self.plan.start_timeout_s,
                lambda s: self.check.distinct > 0
                and len(s.get("processors", [])) == self.plan.workers,
                expected=f"{self.plan.workers} processors registered and a first order "
                         "processed"):
            return False
        for factor in self.plan.factors:
            if factor != api.get("/status").json().get("elasticityFactor"):
                answer = api.post("/scale", json={"elasticityFactor": factor})
                answer.raise_for_status()
                self._say(f"POST /scale {factor}: job model version "
                          f"{answer.json()['jobModelVersion']}")
            # a stage runs its seconds once the factor is in effect: the barrier done and
            # every worker on that version (a loaded machine hands over more slowly)
            if not self._wait_until(
                    f"elasticity factor {factor}: handing over", api,
                    self.plan.start_timeout_s, partial(_settled, factor=factor, plan=self.plan),
                    expected=f"elasticity factor {factor} in effect: its version's barrier "
                             f"done and {self.plan.workers} workers running it"):
                return False
            self._wait_until(f"elasticity factor {factor}", api, self.plan.stage_s,
                             lambda s: False)
            if self._stop.is_set():
                return False
        self._producing.clear()
        if not self._produced_all.wait(60):
            self._say("the producer did not flush within 60s")
            return False
        produced = self.produced
        self._wait_until("producer stopped: draining", api, self.plan.drain_timeout_s,
                         lambda s: self.check.distinct >= produced,
                         expected=f"all {produced:,} orders processed")
        with self._check_lock:
            distinct, dup, bad = self.check.distinct, self.check.duplicates, self.check.violations
            wrong = self.check.wrong_totals
        self._say(f"\nproduced {produced:,} orders; processed {distinct:,} distinct "
                  f"({dup} duplicates); per-key order violations: {bad}"
                  + (f"; running totals not exactly their orders': {wrong}"
                     if self.plan.stateful else ""))
        capacity = self.capacity_lines()
        if capacity:
            self._say("the workers' processing rate while busy, by elasticity factor "
                      "(medians of their batches' records/s, summed):\n"
                      + "\n".join(capacity))
        ok = distinct == produced and bad == 0 and wrong == 0
        self._say(("every order processed, each customer's orders in order"
                   + (", every running total exact" if self.plan.stateful else ""))
                  if ok else "CHECK FAILED: see the numbers above")
        return ok

    def _wait_until(self, stage: str, api: httpx.Client, timeout_s: float,
                    done: Callable[[dict[str, Any]], bool], expected: str | None = None) -> bool:
        """Redraw the table until ``done(status)``; False at the deadline (a failure,
        explained, when ``expected`` says what was awaited) or when a process it started
        exits."""
        deadline = time.monotonic() + timeout_s
        while not self._stop.is_set():
            try:
                status = api.get("/status").json()
            except httpx.HTTPError as e:
                status = {"processors": [], "error": str(e)}
            with self._check_lock:
                table = render(status, stage, time.monotonic() - self._started,
                               self.produced, self.check)
            self._show(table, stage)
            self._capacity(stage, status)
            if done(status):
                return True
            if time.monotonic() >= deadline:
                if expected is not None:
                    self._timed_out(stage, timeout_s, expected, status)
                return False
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    self._say(f"{name} (pid {proc.pid}) exited early with status "
                              f"{proc.returncode} during '{stage}'")
                    self._say(self._log_tail(name))
                    return False
            self._stop.wait(min(self.plan.refresh_s, max(0.0, deadline - time.monotonic())))
        return False

    def _timed_out(self, stage: str, timeout_s: float, expected: str,
                   status: dict[str, Any]) -> None:
        procs = [p.get("processorId") for p in status.get("processors", [])]
        with self._check_lock:
            processed = self.check.distinct
        self._say(f"gave up waiting for '{stage}' after {timeout_s:.0f}s: expected "
                  f"{expected}; saw processors {procs or 'none'}, {processed:,} orders "
                  f"processed of {self.produced:,} produced, job model version "
                  f"{status.get('latestVersion')} (barrier {status.get('barrier')})"
                  + (f", status error {status['error']}" if "error" in status else ""))
        for name in self._procs:
            self._say(self._log_tail(name))

    def _log_tail(self, name: str, lines: int = 8) -> str:
        path = self.work_dir / f"{name}.log"
        try:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError as e:
            return f"log of {name}: {path} unreadable ({e})"
        body = "".join(f"\n    {line}" for line in tail) or "\n    (empty)"
        return f"last lines of {path}:{body}"

    # -- processes

    def _topics(self, bootstrap: str) -> None:
        create_topics(bootstrap, [(INPUT_TOPIC, self.plan.partitions), (OUTPUT_TOPIC, 1)])

    def _spawn(self, name: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        log = (self.work_dir / f"{name}.log").open("wb")
        # its own process group: stopping it stops what it started (a worker's JVM), and
        # Ctrl-C reaches only the demo, which stops everything in order
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", *args],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self._procs[name] = proc
        self._say(f"started pid {proc.pid}: {name}")
        return proc

    def _coordinator(self, bootstrap: str) -> str:
        port = free_port()
        proc = self._spawn("coordinator", [
            "serve", "--port", str(port), "--data-dir", str(self.work_dir / "coordinator"),
            "--kafka-bootstrap", bootstrap, "--input", f"kafka.{INPUT_TOPIC}",
            "--elasticity-factor", str(self.plan.factors[0]), "--debounce-ms", "200",
            *(["--stateful"] if self.plan.stateful else []), "--log-level", "WARNING"])
        url = f"http://127.0.0.1:{port}"
        if wait_until_answering(f"{url}/readyz", proc, 30):
            return url
        raise RuntimeError(f"the coordinator did not start; see {self.work_dir}/coordinator.log")

    def _worker(self, url: str, bootstrap: str, i: int) -> None:
        app = "total_per_customer" if self.plan.stateful else "process_order"
        state = ["--stateful", "--state-dir", str(self.work_dir / f"state-{i}"),
                 "--blob-store", f"file://{self.work_dir / 'blobs'}"
                 ] if self.plan.stateful else []
        self._spawn(f"worker-{i}", [
            "worker", "--coordinator", url, "--api", "task",
            "--app", f"worker.demo_app:{app}", "--output-topic", OUTPUT_TOPIC,
            "--kafka-bootstrap", bootstrap, "--spark-master", self.plan.spark_master,
            "--processor-id", f"worker-{i}", "--location", f"host-{i}", *state,
            "--log-level", "WARNING"])

    # -- data

    def _produce(self, bootstrap: str) -> None:
        produce_orders(bootstrap, INPUT_TOPIC, self.plan.rate, self.plan.keys,
                       lambda: not self._stop.is_set() and self._producing.is_set(),
                       on_delivery=self._delivered)
        self._produced_all.set()

    def _delivered(self, error: object, _msg: object) -> None:
        # counted once Kafka has it: an order the broker never took is not Coxswain's loss
        if error is None:
            self.produced += 1

    def _consume(self, bootstrap: str) -> None:
        consumer = Consumer(plain(bootstrap).client(
            {"group.id": "coxswain-demo", "enable.auto.commit": False, "log_level": 2}))
        consumer.assign([TopicPartition(OUTPUT_TOPIC, 0, 0)])
        try:
            while not self._stop.is_set():
                for msg in consumer.consume(500, 0.5):
                    if msg.error() is not None:
                        continue
                    record = json.loads(msg.value() or b"{}")
                    with self._check_lock:
                        self.check.add(record["key"], int(record["seq"]),
                                       record.get("orders"), record.get("totalCents"))
        finally:
            consumer.close()

    # -- output

    def _show(self, table: str, stage: str) -> None:
        if self._live:  # redraw in place, the latest events under the table
            events = "".join(f"\n  {e}" for e in self._events[-6:])
            self._out.write("\x1b[H\x1b[2J" + table + "\n" + events + "\n")
        else:  # a log, not a screen: the table when the stage changes, and every 30 s
            now = time.monotonic()
            if stage == self._shown[0] and now - self._shown[1] < LOG_TABLE_EVERY_S:
                return
            self._shown = (stage, now)
            self._out.write(table + "\n\n")
        self._out.flush()

    def _capacity(self, stage: str, status: dict[str, Any]) -> None:
        """Sample the workers' summed batch rates during a factor's stage (what they
        process per second while busy: the capacity a factor gives, whatever the
        producer's rate)."""
        if not stage.startswith("elasticity factor ") or stage.endswith("handing over"):
            return
        rates = [float((p.get("stats") or {}).get("recordsPerSecond") or 0)
                 for p in status.get("processors", [])]
        if rates and all(r > 0 for r in rates):
            self._rates.setdefault(stage.removeprefix("elasticity factor "), []).append(
                sum(rates))

    def capacity_lines(self) -> list[str]:
        """Per factor, the median of the workers' summed batch rates in its stage."""
        return [f"  factor {factor}: {statistics.median(rates):,.0f} records/s"
                for factor, rates in self._rates.items() if rates]

    def _say(self, line: str) -> None:
        self._events.append(f"{time.monotonic() - self._started:5.0f}s  {line.strip()}")
        self._out.write(line + "\n")
        self._out.flush()
