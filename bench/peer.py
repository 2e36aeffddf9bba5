"""Coxswain against plain Spark Structured Streaming on the same job (issue #48): one real
Kafka broker, an input topic of 2 partitions written by confluent-kafka's default
partitioner, the same Python function on both sides (``process_task`` for Coxswain,
``mapInPandas`` or ``transformWithStateInPandas`` for Spark), the same Spark master.

Jobs:

* ``zero``: no work per record (each record passed through);
* ``sleep``: 2 ms of waiting per record (an external call);
* ``count``: a counter per key (Coxswain's ``ctx.state``; Spark's
  ``transformWithStateInPandas`` on its RocksDB state store provider), one output record
  per input record carrying the key's count; every run checks the final counts.

Throughput: each run has a topic of its own. The system is started and warmed on
``--warm-records`` records (Python workers spawned, consumers connected, the JVM's
just-in-time compiler through the hot paths: start-up excluded for both, as in a job
that has run a while); then a
backlog of ``--records`` records is written in one Kafka transaction, which both systems
read ``read_committed``, so the whole backlog appears at one instant, the commit.
Records/s is the backlog over the commit to the last output record's append time: every
batch, planning and commit of both systems inside it. (Timing from the first output
record instead would leave out the first batch, the whole backlog for plain Spark.)

Latency (``--latency``): the system warmed as above, then records produced at
``--latency-rate``/s for ``--latency-seconds``, each carrying its produce time; a
record's latency is its output's append time minus that.

A batch's fixed cost (``--fixed-cost``): the system warmed as above, then one record
every ``--fixed-interval`` s for ``--fixed-seconds``, so every batch holds one record;
for each such batch, Spark's own breakdown of its trigger (``durationMs``: the source's
planning ``latestOffset``, ``queryPlanning``, the offset log ``walCommit``, the batch
itself ``addBatch``, the commit log ``commitOffsets``), from the plain query's progress
and from the worker's heartbeat stats (``/status``: ``triggerMs``, sampled). Medians per
part.

With ``--real-time`` the latency is also taken on plain Spark's real-time mode (4.1+,
long-running tasks; its trigger duration is how often it commits, 5 s at least): the
records passed through with no Python (a projection, which the mode allows), and the
job's own ``mapInPandas``, which the mode refuses (its operator allowlist) unless
``spark.sql.streaming.realTimeMode.allowlistCheck`` is off.

Each measure is taken ``--runs`` times, the two systems alternated, and the median
printed with the ratio Coxswain / plain Spark. Coxswain runs on its defaults (Python
reader, the default batch target) unless ``--worker-args`` says otherwise; plain Spark on
its default trigger, ``spark.sql.shuffle.partitions`` set to the master's cores (what a
user of a 2-core job sets; 200 partitions would slow it for nothing).

Run: python -m bench.peer [--jobs zero sleep count] [--records 100000] [--runs 3]
     [--master local[2]] [--factors 1] [--latency] [--latency-rate 300]
Goals (#48): Coxswain F=1 >= 1.0x plain Spark on zero and sleep, ``ctx.state`` >= 1.0x
on count; latency p50 and p99 within 1.5x of plain Spark's.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
from confluent_kafka import Consumer, Producer, TopicPartition

from bench.elasticity import topics
from service.local.kafka import LocalKafka
from service.local.ports import stop_process_group
from tests.service.server import Server

SLEEP_S = 0.002
JOBS = ("zero", "sleep", "count")
LOGS: Path | None = None  # --logs: where the workers' logs are kept
#: the parts of a trigger's ``durationMs`` the fixed cost reports, in a trigger's order
TRIGGER_PARTS = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets",
                 "triggerExecution")
#: a running system's triggers so far that read at most a few records (each a
#: ``durationMs``), for the fixed cost
Probe = Any


# -- the job's function, on both sides (values are b"<seq> <produced at>")

def _passed(keys: Any, values: Any, sleep: bool) -> pd.DataFrame:
    if sleep:
        for _ in range(len(values)):
            time.sleep(SLEEP_S)
    return pd.DataFrame({"key": list(keys), "value": list(values)})


def zero_task(ctx: Any, rows: pd.DataFrame) -> pd.DataFrame:
    return _passed(rows["key"], rows["value"], False)


def sleep_task(ctx: Any, rows: pd.DataFrame) -> pd.DataFrame:
    return _passed(rows["key"], rows["value"], True)


def count_task(ctx: Any, rows: pd.DataFrame) -> pd.DataFrame:
    out = []
    for k, v in zip(rows["key"], rows["value"], strict=True):
        count = ctx.state.get(k, "count", 0) + 1
        ctx.state.set(k, "count", count)
        out.append(v + b" " + str(count).encode())
    return pd.DataFrame({"key": list(rows["key"]), "value": out})


def _plain_zero(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for rows in batches:
        yield _passed(rows["key"], rows["value"], False)


def _plain_sleep(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for rows in batches:
        yield _passed(rows["key"], rows["value"], True)


def _plain_counter() -> Any:
    """Spark's stateful processor counting per key (made where pyspark is imported)."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Counter(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", "c long")

        def handleInputRows(self, key: Any, rows: Any,  # noqa: N802 (Spark's names)
                            timerValues: Any) -> Iterator[pd.DataFrame]:  # noqa: N803
            count = self.count.get()[0] if self.count.exists() else 0
            keys: list[bytes] = []
            values: list[bytes] = []
            for frame in rows:
                for k, v in zip(frame["key"], frame["value"], strict=True):
                    count += 1
                    keys.append(bytes(k))
                    values.append(bytes(v) + b" " + str(count).encode())
            self.count.update((count,))
            yield pd.DataFrame({"key": keys, "value": values})

        def close(self) -> None:
            pass

    return Counter()


# -- input and output

#: written before the backlog: the systems warmed on them. A few hundred start the Python
#: workers and connect the consumers, but leave the JVM's just-in-time compiler cold: the
#: first batch of 100 000 records then spends ~0.9 s of CPU in C1 and C2 compilations on
#: a 2-core host (the worker JVM's compiler threads, measured). Plain Spark's JVM is the
#: bench process's own and stays warm from one run to the next (its first run in a
#: process: 22-38k records/s, its third 67-94k); a worker's JVM is new in each run
WARM_RECORDS = 50_000


def _keyed(i: int, keys: int) -> bytes:
    return f"user-{i * 7919 % keys}".encode()


def produce_warm(kafka: LocalKafka, topic: str, per_key: dict[bytes, int],
                 n: int = WARM_RECORDS) -> None:
    """``n`` warm-up records (keys of their own, counted in ``per_key``)."""
    p = Producer(kafka.client_settings().client({"acks": "all", "linger.ms": 5,
                                                 "log_level": 2}))
    for i in range(n):
        key = f"warm-{i % 20}".encode()
        while True:
            try:
                p.produce(topic, key=key, value=f"{per_key[key]} {time.time():.6f}".encode())
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                p.poll(0.1)
        per_key[key] += 1
    p.flush(60)


def produce_backlog(kafka: LocalKafka, topic: str, n: int, keys: int,
                    per_key: dict[bytes, int]) -> float:
    """``n`` records over ``keys`` keys (the default partitioner) in one transaction;
    counted in ``per_key``. Returns the commit's time (time.time())."""
    p = Producer(kafka.client_settings().client({
        "acks": "all", "linger.ms": 20, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
        "transaction.timeout.ms": 600_000, "log_level": 2}))
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(n):
        key = _keyed(i, keys)
        value = f"{per_key[key]} {time.time():.6f}".encode()
        while True:
            try:
                p.produce(topic, key=key, value=value)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                p.poll(0.1)
        per_key[key] += 1
        if i % 10000 == 0:
            p.poll(0)
    p.flush(120)
    p.commit_transaction(60)
    return time.time()


def produce_at(kafka: LocalKafka, topic: str, rate: float, seconds: float,
               stop: threading.Event) -> int:
    """Records at ``rate``/s for ``seconds``, each stamped as it is produced."""
    p = Producer(kafka.client_settings().client({"acks": "all", "linger.ms": 0,
                                                 "log_level": 2}))
    started = time.monotonic()
    sent = 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        if (time.monotonic() - started) >= seconds:
            break
        while sent < due:
            key = f"user-{sent * 7919 % 1000}".encode()
            p.produce(topic, key=key, value=f"{sent} {time.time():.6f}".encode())
            sent += 1
        p.poll(0)
        time.sleep(0.002)
    p.flush(30)
    return sent


class Output:
    """The output topic's records as they come: (append time in s, key, value)."""

    def __init__(self, kafka: LocalKafka, topic: str) -> None:
        self._consumer = Consumer(kafka.client_settings().client(
            {"group.id": uuid.uuid4().hex, "log_level": 2}))
        self._consumer.assign([TopicPartition(topic, 0, 0)])
        self.records: list[tuple[float, bytes, bytes]] = []

    def until(self, n: int, timeout_s: float = 900) -> list[tuple[float, bytes, bytes]]:
        """The first ``n`` records (waiting for them)."""
        deadline = time.monotonic() + timeout_s
        while len(self.records) < n and time.monotonic() < deadline:
            for msg in self._consumer.consume(10000, 1.0):
                if msg.error() is None:
                    self.records.append((msg.timestamp()[1] / 1000, msg.key() or b"",
                                         msg.value() or b""))
        if len(self.records) < n:
            raise RuntimeError(f"only {len(self.records)} of {n} records came out")
        return self.records[:n]

    def close(self) -> None:
        self._consumer.close()


def read_output(kafka: LocalKafka, topic: str, n: int) -> list[tuple[float, bytes, bytes]]:
    """(append time in s, key, value) of ``n`` output records."""
    out = Output(kafka, topic)
    try:
        return out.until(n)
    finally:
        out.close()


@dataclass(frozen=True)
class Measured:
    rate: float = 0.0  # records/s, first output to last
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    p99_ms: float = 0.0


def throughput(out: list[tuple[float, bytes, bytes]], since: float, n: int, job: str,
               per_key: dict[bytes, int]) -> Measured:
    """``n`` records over ``since`` (the backlog's commit) to the last output record; a
    count job's final counts checked (duplicates allowed, never a wrong or missing
    count)."""
    if job == "count":
        final: dict[bytes, int] = {}
        for _, k, v in out:
            seq, _, count = v.split(b" ")
            if int(count) != int(seq) + 1:
                raise AssertionError(f"key {k!r}: count {count!r} at seq {seq!r}")
            final[k] = max(final.get(k, 0), int(count))
        if final != per_key:
            raise AssertionError("final counts differ from the records per key")
    return Measured(rate=n / max(0.001, max(t for t, _, _ in out) - since))


def backlog_run(kafka: LocalKafka, source: str, out_topic: str, job: str, n: int,
                keys: int, warm: int = WARM_RECORDS) -> Measured:
    """Warm the running system on ``warm`` records, write the backlog, measure it
    drained."""
    per_key: dict[bytes, int] = defaultdict(int)
    out = Output(kafka, out_topic)
    try:
        produce_warm(kafka, source, per_key, warm)
        out.until(warm)
        committed = produce_backlog(kafka, source, n, keys, per_key)
        return throughput(out.until(warm + n), committed, n, job, dict(per_key))
    finally:
        out.close()


def latencies(out: list[tuple[float, bytes, bytes]]) -> Measured:
    """Percentiles of output append time minus produce time (the warm-up records left
    out)."""
    ms = sorted(max(0.0, (t - float(v.split(b" ")[1])) * 1000) for t, k, v in out
                if not k.startswith(b"warm-"))

    def pct(q: float) -> float:
        return ms[min(len(ms) - 1, int(q * len(ms)))]

    return Measured(p50_ms=pct(0.50), p95_ms=pct(0.95), p99_ms=pct(0.99))


# -- the two systems

def run_coxswain(kafka: LocalKafka, source: str, job: str, master: str, factor: int,
                 tmp: Path, worker_args: list[str], produce: Any, sample: bool = False
                 ) -> tuple[Any, Path]:
    """Runs ``produce(out_topic, source, probe)`` (-> its result) while a coordinator and
    one worker run ``job``; returns the result and the worker's log. ``probe`` gives the
    worker's triggers of a few records so far when ``sample`` (``/status`` polled ten
    times a second meanwhile: only for the fixed cost, not beside the other measures)."""
    out_topic = f"out-{uuid.uuid4().hex[:8]}"
    topics(kafka, (out_topic, 1))
    data = tmp / f"coxswain-{uuid.uuid4().hex[:6]}"
    data.mkdir()
    stateful = ["--stateful"] if job == "count" else []
    secured: list[str] = []
    if kafka.sasl_ssl is not None:  # the password in a file of mode 600
        props = data / "client.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in kafka.client_settings().options))
        props.chmod(0o600)
        secured = ["--kafka-config", str(props)]
    server = Server(data, ["--kafka-bootstrap", kafka.bootstrap, "--input", f"kafka.{source}",
                           *secured,
                           "--elasticity-factor", str(factor), "--debounce-ms", "100",
                           "--log-level", "WARNING", *stateful]).start()
    state = ["--state-dir", str(data / "state"), "--blob-store",
             f"file://{data / 'blobs'}"] if stateful else []
    log = data / "worker.log"
    sampled: list[dict[str, int]] = []
    sampling = threading.Event()
    sampler = threading.Thread(target=_sample_triggers, args=(server.url, sampled, sampling),
                               daemon=True)
    if sample:
        sampler.start()
    worker = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "worker", "--coordinator", server.url,
         "--api", "task", "--app", f"bench.peer:{job}_task", "--output-topic", out_topic,
         "--kafka-bootstrap", kafka.bootstrap, "--spark-master", master,
         "--processor-id", "w0", *stateful, *state, *secured, *worker_args],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        return produce(out_topic, source, lambda: list(sampled)), log
    finally:
        sampling.set()
        if sample:
            sampler.join()
        stop_process_group(worker, grace_s=60)
        server.stop()
        if LOGS is not None:  # kept for a look at its batches
            LOGS.mkdir(parents=True, exist_ok=True)
            shutil.copy(log, LOGS / f"{job}-f{factor}-{data.name}.log")


#: a batch of at most this many records counts as one of the fixed cost's
FEW_RECORDS = 3


def _sample_triggers(url: str, sampled: list[dict[str, int]], stop: threading.Event) -> None:
    """The worker's last trigger (``triggerMs`` of its heartbeat stats in ``/status``),
    each new one of a batch of at most :data:`FEW_RECORDS` records, until ``stop``."""
    last: Any = None
    with httpx.Client(timeout=2.0) as client:
        while not stop.wait(0.1):
            try:
                found = client.get(f"{url}/status").json().get("processors") or []
            except (httpx.HTTPError, ValueError):
                continue
            for p in found:
                stats = p.get("stats") or {}
                trigger = stats.get("triggerMs") or {}
                seen = (trigger, stats.get("batchSeconds"), stats.get("recordsPerSecond"))
                if "addBatch" not in trigger or seen == last:
                    continue
                last = seen
                records = float(stats.get("recordsPerSecond") or 0) * float(
                    stats.get("batchSeconds") or 0)
                if 0 < records <= FEW_RECORDS + 0.5:
                    sampled.append(dict(trigger))


def run_plain(kafka: LocalKafka, source: str, job: str, master: str, tmp: Path,
              produce: Any, real_time: str | None = None) -> Any:
    """Runs ``produce(out_topic, source)`` while a plain Spark query runs ``job``; with
    ``real_time``, in Spark's real-time mode (``trigger(realTime=...)``, Spark 4.1+):
    ``"jvm"`` the records passed through with no Python (a projection: what the mode
    allows), ``"python"`` the job's own ``mapInPandas``, which the mode refuses unless
    its operator allowlist check is turned off."""
    from pyspark.sql import SparkSession

    from worker.jvm.jars import connector_jars

    out_topic = f"out-{uuid.uuid4().hex[:8]}"
    topics(kafka, (out_topic, 1))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    cores = re.fullmatch(r"local\[(\d+)\]", master)
    spark = (SparkSession.builder.master(master).appName("plain")
             .config("spark.jars", ",".join(str(p) for p in connector_jars()))
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", cores.group(1) if cores else "8")
             .config("spark.sql.streaming.realTimeMode.allowlistCheck",
                     "false" if real_time == "python" else "true")
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state."
                     "RocksDBStateStoreProvider")
             .getOrCreate())
    try:
        df = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", kafka.bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest")
              # as Coxswain reads: a transaction's records appear at its commit
              .option("kafka.isolation.level", "read_committed").load()
              .select("key", "value"))
        schema = "key binary, value binary"
        if job == "count":
            df = df.groupBy("key").transformWithStateInPandas(
                _plain_counter(), schema, "Update", "None")
        elif real_time != "jvm":
            df = df.mapInPandas(_plain_zero if job == "zero" else _plain_sleep, schema)
        writer = (df.writeStream.format("kafka")
                  .option("kafka.bootstrap.servers", kafka.bootstrap)
                  .option("topic", out_topic).outputMode("update")
                  .option("checkpointLocation", str(tmp / f"plain-{uuid.uuid4().hex[:6]}")))
        if real_time is not None:  # (the duration: how often it commits; 5 s at least)
            writer = writer.trigger(realTime="5 seconds")  # type: ignore[call-overload]  # (4.1+; not in its overloads)
        query = writer.start()
        def probe() -> list[dict[str, int]]:
            return [dict(p.durationMs) for p in query.recentProgress
                    if 0 < p.numInputRows <= FEW_RECORDS]

        try:
            return produce(out_topic, source, probe)
        finally:
            query.stop()
    finally:
        spark.stop()


def _topic(kafka: LocalKafka) -> str:
    """A new input topic of 2 partitions."""
    source = f"in-{uuid.uuid4().hex[:8]}"
    topics(kafka, (source, 2))
    return source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="*", choices=JOBS, default=list(JOBS),
                        help="the throughput jobs (none: --latency only)")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--sleep-records", type=int, default=8000,
                        help="the backlog of the 2 ms job")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warm-records", type=int, default=WARM_RECORDS,
                        help="records each system runs before it is measured (the sleep "
                             "and count jobs: a tenth, at most their backlog)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--factors", type=int, nargs="+", default=[1])
    parser.add_argument("--latency", action="store_true",
                        help="also measure latency at --latency-rate records/s")
    parser.add_argument("--latency-rate", type=float, default=300.0)
    parser.add_argument("--latency-seconds", type=float, default=60.0)
    parser.add_argument("--real-time", action="store_true",
                        help="latency of plain Spark's real-time mode too: the records "
                             "passed through with no Python, and the job's mapInPandas "
                             "with the mode's operator allowlist check off")
    parser.add_argument("--fixed-cost", action="store_true",
                        help="also measure a batch's fixed cost (batches of one record)")
    parser.add_argument("--fixed-interval", type=float, default=1.0)
    parser.add_argument("--fixed-seconds", type=float, default=30.0)
    parser.add_argument("--worker-args", default="",
                        help="more arguments for `coxswain worker` (one string)")
    parser.add_argument("--logs", type=Path, default=None,
                        help="keep each Coxswain worker's log in this folder")
    args = parser.parse_args()
    global LOGS  # noqa: PLW0603 (a bench's command-line switch)
    LOGS = args.logs
    worker_args = shlex.split(args.worker_args)
    kafka = LocalKafka.create().start()
    results: dict[str, list[Measured]] = defaultdict(list)
    latency_systems = ["plain", *(["real-time jvm", "real-time python"] if args.real_time
                                  else []), *(f"F={f}" for f in args.factors)]
    fixed: dict[str, list[dict[str, int]]] = defaultdict(list)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            for job in args.jobs:
                n = args.sleep_records if job == "sleep" else args.records
                # (the sleep job's 2 ms a record and plain Spark's count at ~2 000
                # records/s: a tenth of the zero job's warm-up is seconds of either)
                warm = (args.warm_records if job == "zero"
                        else min(args.warm_records // 10, n))

                def backlog(out_topic: str, source: str, _: Probe, job: str = job,
                            n: int = n, warm: int = warm) -> Measured:
                    return backlog_run(kafka, source, out_topic, job, n, args.keys, warm)

                for run in range(args.runs):  # alternated: drift hits both alike
                    found = run_plain(kafka, _topic(kafka), job, args.master, tmp, backlog)
                    results[f"{job} plain"].append(found)
                    print(f"  {job} plain Spark run {run + 1}: {found.rate:,.0f} rec/s",
                          flush=True)
                    for factor in args.factors:
                        found, _ = run_coxswain(kafka, _topic(kafka), job, args.master,
                                                factor, tmp, worker_args, backlog)
                        results[f"{job} F={factor}"].append(found)
                        print(f"  {job} Coxswain F={factor} run {run + 1}: "
                              f"{found.rate:,.0f} rec/s", flush=True)
            if args.latency:
                for run in range(args.runs):
                    for system in latency_systems:
                        source = _topic(kafka)
                        stop = threading.Event()

                        def timed(out_topic: str, source: str, _: Probe,
                                  stop: threading.Event = stop) -> Measured:
                            out = Output(kafka, out_topic)
                            try:  # warmed first, as for throughput
                                produce_warm(kafka, source, defaultdict(int),
                                             args.warm_records)
                                out.until(args.warm_records)
                                sent = produce_at(kafka, source, args.latency_rate,
                                                  args.latency_seconds, stop)
                                return latencies(out.until(args.warm_records + sent))
                            finally:
                                out.close()

                        if system == "plain":
                            found = run_plain(kafka, source, "zero", args.master, tmp, timed)
                        elif system.startswith("real-time"):
                            found = run_plain(kafka, source, "zero", args.master, tmp, timed,
                                              system.split()[1])
                        else:
                            found, _ = run_coxswain(kafka, source, "zero", args.master,
                                                    int(system[2:]), tmp, worker_args, timed)
                        results[f"latency {system}"].append(found)
                        print(f"  latency {system} run {run + 1}: p50 {found.p50_ms:.0f} "
                              f"p95 {found.p95_ms:.0f} p99 {found.p99_ms:.0f} ms", flush=True)
            if args.fixed_cost:
                for run in range(args.runs):
                    for system in ["plain", *(f"F={f}" for f in args.factors)]:
                        def one_by_one(out_topic: str, source: str, probe: Probe
                                       ) -> list[dict[str, int]]:
                            out = Output(kafka, out_topic)
                            try:
                                produce_warm(kafka, source, defaultdict(int),
                                             args.warm_records)
                                out.until(args.warm_records)
                                before = len(probe())
                                sent = produce_at(kafka, source, 1 / args.fixed_interval,
                                                  args.fixed_seconds, threading.Event())
                                out.until(args.warm_records + sent)
                                time.sleep(3)  # (the last stats come with a heartbeat)
                                found: list[dict[str, int]] = probe()[before:]
                                return found
                            finally:
                                out.close()

                        if system == "plain":
                            triggers = run_plain(kafka, _topic(kafka), "zero", args.master,
                                                 tmp, one_by_one)
                        else:
                            triggers, _ = run_coxswain(kafka, _topic(kafka), "zero",
                                                       args.master, int(system[2:]), tmp,
                                                       worker_args, one_by_one, sample=True)
                        fixed[system].extend(triggers)
                        print(f"  fixed cost {system} run {run + 1}: {len(triggers)} batches, "
                              + ", ".join(f"{k} {_median_of(triggers, k):.0f}"
                                          for k in TRIGGER_PARTS) + " ms", flush=True)
    finally:
        kafka.destroy()
    print(f"load average at end: {os.getloadavg()}")
    print(f"\nmedians of {args.runs} runs, master {args.master}, "
          f"warmed on {args.warm_records} records, "
          f"worker args {args.worker_args or '(defaults)'}")
    print("| job | plain Spark rec/s | Coxswain | rec/s | x plain |")
    print("|---|---|---|---|---|")
    for job in args.jobs:
        base = statistics.median(m.rate for m in results[f"{job} plain"])
        for factor in args.factors:
            rate = statistics.median(m.rate for m in results[f"{job} F={factor}"])
            print(f"| {job} | {base:,.0f} | F={factor} | {rate:,.0f} | {rate / base:.2f} |")
    if args.latency:
        print(f"\n| latency at {args.latency_rate:g} rec/s | p50 ms | p95 ms | p99 ms "
              "| x plain p50 | x plain p99 |")
        print("|---|---|---|---|---|---|")
        plain = results["latency plain"]
        b50 = statistics.median(m.p50_ms for m in plain)
        b99 = statistics.median(m.p99_ms for m in plain)
        for system in latency_systems:
            found = results[f"latency {system}"]
            p50 = statistics.median(m.p50_ms for m in found)
            p95 = statistics.median(m.p95_ms for m in found)
            p99 = statistics.median(m.p99_ms for m in found)
            print(f"| {system} | {p50:.0f} | {p95:.0f} | {p99:.0f} | "
                  f"{p50 / max(b50, 1e-9):.2f} | {p99 / max(b99, 1e-9):.2f} |")
    if args.fixed_cost:
        print(f"\n| a batch of one record, medians over {args.runs} runs, ms | batches | "
              + " | ".join(TRIGGER_PARTS) + " |")
        print("|---|---|" + "---|" * len(TRIGGER_PARTS))
        for system in ["plain", *(f"F={f}" for f in args.factors)]:
            found = fixed[system]
            print(f"| {system} | {len(found)} | "
                  + " | ".join(f"{_median_of(found, k):.0f}" for k in TRIGGER_PARTS) + " |")


def _median_of(triggers: list[dict[str, int]], part: str) -> float:
    """The median of ``part`` over ``triggers`` (0 for none)."""
    values = [t.get(part, 0) for t in triggers]
    return statistics.median(values) if values else 0.0


if __name__ == "__main__":
    main()
