"""Worker apps used by the end-to-end tests (run inside worker processes)."""

from __future__ import annotations

import json
import os

import pandas as pd
from confluent_kafka import Producer
from pyspark.sql import DataFrame

from worker.runtime import BatchContext, TaskContext


def record_to_topic(df: DataFrame, ctx: BatchContext) -> None:
    """Write (key, seq, task, processor, version) of every record to $OUTPUT_TOPIC."""
    rows = df.select("key", "value", "partition", "offset", "taskName") \
        .orderBy("partition", "offset").collect()
    producer = Producer({"bootstrap.servers": os.environ["KAFKA_BOOTSTRAP"],
                         "acks": "all", "enable.idempotence": True})
    for r in rows:
        producer.produce(os.environ["OUTPUT_TOPIC"], key=r["key"], value=json.dumps({
            "key": r["key"].decode(), "seq": int(r["value"]), "task": r["taskName"],
            "processor": ctx.processor_id, "version": ctx.version, "batch": ctx.batch_id,
            "offset": r["offset"], "partition": r["partition"]}).encode())
    producer.flush(30)


def slow_record_to_topic(df: DataFrame, ctx: BatchContext) -> None:
    """``record_to_topic`` after $BATCH_SLEEP_S seconds of waiting per batch with records:
    a batch that cannot be cut short (process_batch), as on a starved machine."""
    import time

    if not df.isEmpty():
        time.sleep(float(os.environ.get("BATCH_SLEEP_S", "0")))
    record_to_topic(df, ctx)


def echo_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """process_task: one output row per input row, (key, seq, task, processor, version)."""
    return pd.DataFrame({
        "key": list(rows["key"]),
        "value": [json.dumps({"key": k.decode(), "seq": int(v), "task": ctx.task_name,
                              "processor": ctx.processor_id, "version": ctx.version,
                              "offset": int(o), "partition": int(p)})
                  for k, v, o, p in zip(rows["key"], rows["value"], rows["offset"],
                                        rows["partition"], strict=True)]})


def count_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """process_task with state: per key a counter; one output row per input row with
    (key, seq, count). With exactly-once effect on state, count == seq + 1 always."""
    values = []
    for k, v, o, p in zip(rows["key"], rows["value"], rows["offset"], rows["partition"],
                          strict=True):
        count = ctx.state.get(k, "count", 0) + 1
        ctx.state.set(k, "count", count)
        values.append(json.dumps({"key": k.decode(), "seq": int(v), "count": count,
                                  "task": ctx.task_name, "processor": ctx.processor_id,
                                  "version": ctx.version, "offset": int(o),
                                  "partition": int(p)}))
    return pd.DataFrame({"key": list(rows["key"]), "value": values})


def fat_count_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """``count_task`` whose keys named ``fat-*`` also hold $FAT_STATE_BYTES (1 MB) of
    random bytes each (incompressible): a big state to restore."""
    size = int(os.environ.get("FAT_STATE_BYTES", "1000000"))
    for k in rows["key"]:
        if k.startswith(b"fat-"):
            ctx.state.set_bytes(k, "pad", os.urandom(size))
    return count_task(ctx, rows)


def slow_fat_count_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """``fat_count_task`` with 4 ms of waiting per record (bench/handover's kill of a
    worker holding a big state)."""
    import time

    time.sleep(0.004 * len(rows))
    return fat_count_task(ctx, rows)


def slow_echo_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """``echo_task`` with 4 ms of waiting per record (an external call): one task does at
    most 250 records/s, so throughput grows with the elasticity factor."""
    import time

    time.sleep(0.004 * len(rows))
    return echo_task(ctx, rows)


def slow_count_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """``count_task`` with 4 ms of waiting per record (an external call)."""
    import time

    time.sleep(0.004 * len(rows))
    return count_task(ctx, rows)


def slow_kinesis_echo_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """``kinesis_echo_task`` with 5 ms of waiting per record: batches take a while."""
    import time

    time.sleep(0.005 * len(rows))
    return kinesis_echo_task(ctx, rows)


def slow_kinesis_count_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """``kinesis_count_task`` with 5 ms of waiting per record: batches take a while."""
    import time

    time.sleep(0.005 * len(rows))
    return kinesis_count_task(ctx, rows)


def kinesis_echo_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """process_task over Kinesis records: one output row per record, (key, seq, task,
    processor, version, shard, sequence number)."""
    return pd.DataFrame({
        "key": list(rows["key"]),
        "value": [json.dumps({"key": k.decode(), "seq": int(v), "task": ctx.task_name,
                              "processor": ctx.processor_id, "version": ctx.version,
                              "shard": int(p), "sequenceNumber": s})
                  for k, v, p, s in zip(rows["key"], rows["value"], rows["partition"],
                                        rows["sequenceNumber"], strict=True)]})


def kinesis_count_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """``count_task`` over Kinesis records: per key a counter in state; one output row
    per record with (key, seq, count, shard). count == seq + 1 across reshards."""
    values = []
    for k, v, p, s in zip(rows["key"], rows["value"], rows["partition"],
                          rows["sequenceNumber"], strict=True):
        count = ctx.state.get(k, "count", 0) + 1
        ctx.state.set(k, "count", count)
        values.append(json.dumps({"key": k.decode(), "seq": int(v), "count": count,
                                  "task": ctx.task_name, "processor": ctx.processor_id,
                                  "version": ctx.version, "shard": int(p),
                                  "sequenceNumber": s}))
    return pd.DataFrame({"key": list(rows["key"]), "value": values})


def failing_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """process_task failing on its first rows, as a bug in an app does."""
    raise ValueError("an order without an amount")


def poisoned_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """``echo_task`` until a record whose value is ``poison``: then it fails, as a bug
    in an app does on a record it did not expect."""
    if (rows["value"] == b"poison").any():
        raise ValueError("an order without an amount")
    return echo_task(ctx, rows)
