"""The chaos run's worker apps (run inside worker processes): every output record names
the worker process (pid) that wrote it, so the check can tell a killed or partitioned
worker's duplicates from others, and when it was processed, so it can time the output a
fault stopped."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd
from confluent_kafka import Producer
from pyspark.sql import DataFrame

PAD = "pad"


def record_with_pid(df: DataFrame, ctx: Any) -> None:
    """process_batch: (key, seq, processor, pid, version, task, partition, at) of every
    record, to $OUTPUT_TOPIC."""
    rows = df.select("key", "value", "partition", "offset", "taskName").orderBy(
        "partition", "offset").collect()
    producer = Producer({"bootstrap.servers": os.environ["KAFKA_BOOTSTRAP"], "acks": "all",
                         "enable.idempotence": True, "log_level": 2})
    now = time.time()
    for r in rows:
        producer.produce(os.environ["OUTPUT_TOPIC"], key=r["key"], value=json.dumps({
            "key": r["key"].decode(), "seq": int(r["value"]), "processor": ctx.processor_id,
            "pid": os.getpid(), "version": ctx.version, "task": r["taskName"],
            "partition": r["partition"], "offset": r["offset"], "at": now}).encode())
    producer.flush(60)


def worker_pid() -> int:
    """The pid of the ``coxswain worker`` process this code runs under: ``process_task``
    runs in a Python worker of Spark's (forked by PySpark's daemon, a child of the JVM,
    a child of the worker process)."""
    pid = os.getpid()
    for _ in range(8):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            break
        if b"service.cli" in cmdline and b"worker" in cmdline:
            return pid
        pid = int(stat[stat.rindex(b")") + 2:].split()[1])  # the parent
        if pid <= 1:
            break
    return os.getpid()


def count_with_pid(ctx: Any, rows: pd.DataFrame) -> pd.DataFrame:
    """process_task with state: per key a counter (and $CHAOS_PAD_BYTES of padding, so
    each commit uploads something); one output per record with (key, seq, count,
    processor, pid, version, task, partition, offset, at), pid the worker process's
    (:func:`worker_pid`)."""
    pad = int(os.environ.get("CHAOS_PAD_BYTES", "0"))
    pid = worker_pid()
    now = time.time()
    values = []
    for k, v, p, o in zip(rows["key"], rows["value"], rows["partition"], rows["offset"],
                          strict=True):
        count = ctx.state.get(k, "count", 0) + 1
        ctx.state.set(k, "count", count)
        if pad:
            ctx.state.set_bytes(k, PAD, os.urandom(pad))
        values.append(json.dumps({"key": k.decode(), "seq": int(v), "count": count,
                                  "processor": ctx.processor_id, "pid": pid,
                                  "version": ctx.version, "task": ctx.task_name,
                                  "partition": int(p), "offset": int(o), "at": now}))
    return pd.DataFrame({"key": list(rows["key"]), "value": values})
