"""Worker apps used by the end-to-end tests (run inside worker processes)."""

from __future__ import annotations

import json
import os

from confluent_kafka import Producer
from pyspark.sql import DataFrame

from worker.runtime import BatchContext


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
