"""A batch run in the driver writes its output itself (``worker.output.driver_kafka``):
each key lands on the partition Spark's Kafka sink puts it on (so a key's output stays in
one partition, in order, whichever path ran its batch), every record is acknowledged
before the batch ends, and an output that cannot be delivered fails the batch."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pandas as pd
import pytest
from confluent_kafka import Consumer
from pyspark.sql import SparkSession

from common.kafka_clients import plain
from service.local.kafka import LocalKafka
from service.local.orders import create_topics
from worker.output.driver_kafka import DriverOutput, OutputNotDelivered
from worker.runtime import spark_session
from worker.runtime.task_api import OUTPUT_SCHEMA


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]", "driver-output")
    yield session
    session.stop()


def _partitions(kafka: LocalKafka, topic: str, expected: int) -> dict[bytes | None, set[int]]:
    """Each key's partitions in ``topic`` once ``expected`` records are read."""
    consumer = Consumer(kafka.client_settings().client({
        "group.id": f"t-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    seen: dict[bytes | None, set[int]] = {}
    read = 0
    try:
        for _ in range(300):
            for m in consumer.consume(500, timeout=0.2):
                assert m.error() is None, m.error()
                seen.setdefault(m.key(), set()).add(int(m.partition() or 0))
                read += 1
            if read >= expected:
                return seen
    finally:
        consumer.close()
    raise AssertionError(f"{read} of {expected} records in {topic}")


def test_keys_land_where_sparks_kafka_sink_puts_them(spark: SparkSession,
                                                     kafka: LocalKafka) -> None:
    by_spark, by_driver = (f"out-{uuid.uuid4().hex[:8]}" for _ in range(2))
    create_topics(kafka.client_settings(), [(by_spark, 5), (by_driver, 5)])
    keys = [f"user-{i}".encode() for i in range(200)]
    rows = pd.DataFrame({"key": keys, "value": [b"v"] * len(keys)})
    (spark.createDataFrame(rows, OUTPUT_SCHEMA).write.format("kafka")
     .option("kafka.bootstrap.servers", kafka.bootstrap).option("topic", by_spark).save())
    output = DriverOutput(kafka.client_settings(), by_driver)
    try:
        output.connect()  # (ahead of the first write, as the driver warms up)
        assert output.write([rows.iloc[:70], rows.iloc[70:]]) == len(keys)
        assert output.write([]) == 0
    finally:
        output.close()
    spark_parts = _partitions(kafka, by_spark, len(keys))
    assert all(len(p) == 1 for p in spark_parts.values())
    assert _partitions(kafka, by_driver, len(keys)) == spark_parts
    assert len({p for ps in spark_parts.values() for p in ps}) == 5  # (spread, not one)


def test_output_that_is_not_acknowledged_fails_the_batch() -> None:
    # a port nothing listens on: the record is never acknowledged
    output = DriverOutput(plain("127.0.0.1:9"), "nowhere", timeout_s=1.0)
    with pytest.raises(OutputNotDelivered, match="1 of 1 output records to nowhere"):
        output.write([pd.DataFrame({"key": [b"k"], "value": [b"v"]})])
