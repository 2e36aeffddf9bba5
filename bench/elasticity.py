"""Elasticity on a real Kafka broker and Spark: a job whose per-record work waits 2 ms (an
external call), on a topic of 2 partitions, one worker with local[8].

* Coxswain, ``process_task`` at elasticity factor 1, 2, 4, 8: records/s, from the first
  record's start of work to the last one's end (Spark start-up excluded), and per-key
  order violations (a record whose work ended before that of a lower sequence number);
* the same work as a plain Spark Kafka query (``mapInPandas``, no Coxswain), with and
  without ``minPartitions=8``, and the per-key order violations the split produces.

The input is written by confluent-kafka's default partitioner (librdkafka's CRC-32 of
the key), as a Python user's producer has it; ``--key-hashes`` runs each factor under
each job key hash (issue #47: crc32, the hash of that partitioner, against xxhash64),
and every run prints how many of its tasks got records.

($COXSWAIN_BENCH_LOGS: a folder to keep each worker's log in.)

Run: python -m bench.elasticity [--records 16000] [--keys 10000] [--factors 1 2 4 8]
     [--key-hashes xxhash64 crc32] [--worker-args '--target-batch-ms 5000']
     [--checkout OLD_CHECKOUT] [--no-plain]
Targets (issues #6, #47): factor 4 >= 3.5x factor 1 with the default key hash; Coxswain
at factor 1 within 10% of plain Spark; zero order violations for Coxswain.

``python -m bench.elasticity --hash-cost`` instead measures the per-record cost of each
key hash in the workers' filter: a Spark job computing the bucket column over 2 million
in-memory keys, per hash, against no hash (records/s, medians of 5).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from service.local.kafka import LocalKafka
from service.local.ports import stop_process_group
from tests.service.server import Server

WORK_S = 0.002


def slow_task(ctx: Any, rows: pd.DataFrame) -> pd.DataFrame:
    """process_task: 2 ms of waiting per record, then one output record."""
    out = []
    for k, v in zip(rows["key"], rows["value"], strict=True):
        started = time.time()
        time.sleep(WORK_S)
        out.append(json.dumps({"key": k.decode(), "seq": int(v), "t0": started,
                               "t": time.time(), "task": ctx.task_name}))
    return pd.DataFrame({"key": list(rows["key"]), "value": out})


def _plain_work(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for rows in batches:
        out = []
        for k, v in zip(rows["key"], rows["value"], strict=True):
            started = time.time()
            time.sleep(WORK_S)
            out.append(json.dumps({"key": bytes(k).decode(), "seq": int(v), "t0": started,
                                   "t": time.time()}).encode())
        yield pd.DataFrame({"key": list(rows["key"]), "value": out})


def produce(kafka: LocalKafka, topic: str, n: int, keys: int) -> None:
    # idempotent: a retried send on a loaded machine must not write a record twice
    # (a doubled input record would show as wrong counts in a stateful run)
    p = Producer({"bootstrap.servers": kafka.bootstrap,  # the default partitioner
                  "enable.idempotence": True, "acks": "all", "log_level": 2})
    seq: dict[int, int] = defaultdict(int)
    for i in range(n):
        key = i * 7919 % keys
        p.produce(topic, key=f"key-{key}".encode(), value=str(seq[key]).encode())
        seq[key] += 1
    p.flush(60)


def read_output(kafka: LocalKafka, topic: str, n: int, timeout_s: float = 600
                ) -> list[tuple[int, dict[str, Any]]]:
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": uuid.uuid4().hex,
                  "log_level": 2})
    c.assign([TopicPartition(topic, p, 0) for p in range(1)])
    out: list[tuple[int, dict[str, Any]]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = c.poll(1.0)
            if msg is None or msg.error() is not None:
                continue
            out.append((msg.timestamp()[1], json.loads(msg.value() or b"{}")))
    finally:
        c.close()
    if len(out) < n:
        raise RuntimeError(f"only {len(out)} of {n} records came out")
    return out


def steady_rate(out: list[tuple[int, dict[str, Any]]]) -> float:
    """Records/s over the second half of the records (by the end of their work): a
    runtime that ramps its batch size up is past its ramp there."""
    ends = sorted(float(r["t"]) for _, r in out)
    half = len(ends) // 2
    return (len(ends) - half) / max(0.001, ends[-1] - ends[half])


def rate_and_violations(out: list[tuple[int, dict[str, Any]]]) -> tuple[float, int]:
    """Records/s from the first record's start of work to the last one's end; order
    violations: per key, a record processed (by its end time) before a lower sequence."""
    start = min(r["t0"] for _, r in out)
    seconds = max(0.001, max(r["t"] for _, r in out) - start)
    print(f"    steady (the second half of the records): {steady_rate(out):,.0f} records/s",
          flush=True)
    spans: dict[str, list[float]] = defaultdict(list)
    for _, r in out:
        spans[r.get("task", "")].append(r["t0"])
    for task, times in sorted(spans.items()):
        print(f"    {task or '(plain)'}: {len(times)} records, work from "
              f"{min(times) - start:.2f} s to {max(times) - start:.2f} s", flush=True)
    last: dict[str, int] = {}
    violations = 0
    for r in sorted((r for _, r in out), key=lambda r: r["t"]):
        if r["seq"] < last.get(r["key"], -1):
            violations += 1
        last[r["key"]] = max(last.get(r["key"], -1), r["seq"])
    return len(out) / seconds, violations


def topics(kafka: LocalKafka, *specs: tuple[str, int]) -> None:
    admin = AdminClient(kafka.client_settings().client({"log_level": 2}))
    for f in admin.create_topics([NewTopic(t, n, 1) for t, n in specs]).values():
        f.result(60)


def coxswain(kafka: LocalKafka, source: str, factor: int, n: int, tmp: Path,
             worker_args: list[str], checkout: Path | None = None,
             key_hash: str | None = None) -> tuple[float, int, int]:
    """records/s, order violations and the tasks that got records."""
    out_topic = f"out-{uuid.uuid4().hex[:8]}"
    topics(kafka, (out_topic, 1))
    data = tmp / f"f{factor}-{key_hash}"
    data.mkdir()
    server = Server(data, ["--kafka-bootstrap", kafka.bootstrap, "--input", f"kafka.{source}",
                           "--elasticity-factor", str(factor), "--debounce-ms", "100",
                           "--log-level", "WARNING",
                           *(["--key-hash", key_hash] if key_hash else [])]).start()
    # the worker of another checkout (with its own .venv): an older runtime's
    python = str(checkout / ".venv" / "bin" / "python") if checkout else sys.executable
    worker = subprocess.Popen(
        [python, "-m", "service.cli", "worker", "--coordinator", server.url,
         "--api", "task", "--app", "bench.elasticity:slow_task", "--output-topic", out_topic,
         "--kafka-bootstrap", kafka.bootstrap, "--spark-master", "local[8]",
         "--processor-id", "w0", "--log-level", "WARNING", *worker_args],
        stdout=(data / "worker.log").open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True, cwd=checkout,
        env={**os.environ, "PYTHONPATH": str(checkout)} if checkout else None)
    try:
        out = read_output(kafka, out_topic, n)
        return (*rate_and_violations(out), len({r.get("task") for _, r in out}))
    finally:
        stop_process_group(worker, grace_s=60)
        server.stop()
        logs = os.environ.get("COXSWAIN_BENCH_LOGS")  # where to keep the worker's log
        if logs:
            Path(logs).mkdir(parents=True, exist_ok=True)
            shutil.copy(data / "worker.log", Path(logs) / f"{data.name}-worker.log")


def plain_spark(kafka: LocalKafka, source: str, n: int, min_partitions: int | None,
                tmp: Path) -> tuple[float, int]:
    from pyspark.sql import SparkSession

    from worker.jvm.jars import connector_jars

    out_topic = f"out-{uuid.uuid4().hex[:8]}"
    topics(kafka, (out_topic, 1))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[8]").appName("plain")
             .config("spark.jars", ",".join(str(p) for p in connector_jars()))
             .config("spark.ui.enabled", "false").getOrCreate())
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest"))
    if min_partitions:
        reader = reader.option("minPartitions", min_partitions)
    df = reader.load().select("key", "value").mapInPandas(_plain_work, "key binary, value binary")
    query = (df.writeStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap)
             .option("topic", out_topic)
             .option("checkpointLocation", str(tmp / f"plain-{uuid.uuid4().hex[:6]}"))
             .start())
    try:
        return rate_and_violations(read_output(kafka, out_topic, n))
    finally:
        query.stop()
        spark.stop()


def hash_cost(n: int = 2_000_000, runs: int = 5) -> None:
    """records/s of the bucket column per key hash (no hash: the key's length), in one
    local[1] Spark session, medians of ``runs``."""
    import statistics

    from pyspark.sql import SparkSession

    from grouping.key_hash import KeyHash
    from worker.plan import QueryPlan

    spark = (SparkSession.builder.master("local[1]").appName("hash-cost")
             .config("spark.ui.enabled", "false").getOrCreate())
    df = spark.range(n).selectExpr("CAST(CONCAT('user-', id) AS BINARY) AS key",
                                   "id AS offset").cache()
    df.count()
    exprs = {"none": "pmod(length(key), 8)",
             **{k.value: QueryPlan(1, 8, (), key_hash=k).bucket_expr() for k in KeyHash}}
    rates: dict[str, list[float]] = {name: [] for name in exprs}
    for _ in range(runs):
        for name, expr in exprs.items():  # interleaved: drift hits each alike
            started = time.perf_counter()
            df.selectExpr(f"sum({expr})").collect()
            rates[name].append(n / (time.perf_counter() - started))
    spark.stop()
    base = statistics.median(rates["none"])
    print("| bucket column | records/s | x no hash |")
    print("|---|---|---|")
    for name, found in rates.items():
        rate = statistics.median(found)
        print(f"| {name} | {rate:,.0f} | {rate / base:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=16000)
    parser.add_argument("--keys", type=int, default=10000)
    parser.add_argument("--factors", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--no-plain", action="store_true", help="skip the plain Spark runs")
    parser.add_argument("--key-hashes", nargs="+", default=[None],
                        help="run each factor under each of these job key hashes")
    parser.add_argument("--hash-cost", action="store_true",
                        help="only measure each key hash's per-record cost in Spark SQL")
    parser.add_argument("--worker-args", default="",
                        help="more arguments for `coxswain worker`, e.g. "
                             "'--target-batch-ms 5000' (one string)")
    parser.add_argument("--checkout", type=Path, default=None,
                        help="run the worker of this checkout (its .venv), e.g. an older "
                             "runtime's, against this one's services and measures")
    args = parser.parse_args()
    if args.hash_cost:
        hash_cost()
        return
    kafka = LocalKafka.create().start()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            source = f"in-{uuid.uuid4().hex[:8]}"
            topics(kafka, (source, 2))
            produce(kafka, source, args.records, args.keys)
            for key_hash in args.key_hashes:
                for factor in args.factors:
                    rate, bad, tasks = coxswain(kafka, source, factor, args.records, Path(tmp),
                                                shlex.split(args.worker_args), args.checkout,
                                                key_hash)
                    rows.append((f"Coxswain F={factor}"
                                 + (f" {key_hash}" if key_hash else ""), rate, bad))
                    print(f"  {rows[-1][0]}: {rate:,.0f} records/s, {bad} order violations, "
                          f"{tasks} of {2 * factor} tasks got records", flush=True)
            for mp in () if args.no_plain else (None, 8):
                rate, bad = plain_spark(kafka, source, args.records, mp, Path(tmp))
                rows.append((f"plain Spark{' minPartitions=8' if mp else ''}", rate, bad))
                print(f"  {rows[-1][0]}: {rate:,.0f} records/s, {bad} order violations",
                      flush=True)
    finally:
        kafka.destroy()
    base = rows[0][1]
    print("| job | records/s | x F=1 | order violations |")
    print("|-----|-----------|-------|------------------|")
    for name, rate, bad in rows:
        print(f"| {name} | {rate:,.0f} | {rate / base:.2f} | {bad} |")


if __name__ == "__main__":
    main()
