"""``--kafka-reader jvm``: a batch's planned ranges read by Spark's own Kafka connector, on
a real broker and a local Spark: exactly the planned offsets, read-committed, one Spark
partition per Kafka partition in offset order, each row with its range's generation."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from pyspark.sql import SparkSession

from common.kafka_clients import KafkaClientSettings
from service.local.kafka import LocalKafka
from service.local.orders import create_topics
from worker.runtime.spark import spark_session
from worker.runtime.task_api import OUTPUT_SCHEMA
from worker.sources.jvm_kafka import Planned, connector_options, planned_ranges, read_ranges


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]", "jvm-kafka")
    yield session
    session.stop()


def test_planned_ranges_are_the_ones_with_records() -> None:
    offsets = {"v": 3, "r": 2, "p": {"a/0": {"from": 5, "to": 9, "g": 2},
                                     "a/1": {"from": 7, "to": 7, "g": 1},
                                     "b.c/10": {"from": 0, "to": 1, "g": 0}}}
    assert planned_ranges(offsets) == {("a", 0): (5, 9, 2), ("b.c", 10): (0, 1, 0)}
    assert planned_ranges({"v": 0, "p": {}}) == {}
    options = connector_options(planned_ranges(offsets))
    assert json.loads(options["assign"]) == {"a": [0], "b.c": [10]}
    assert json.loads(options["startingOffsets"]) == {"a": {"0": 5}, "b.c": {"10": 0}}
    assert json.loads(options["endingOffsets"]) == {"a": {"0": 9}, "b.c": {"10": 1}}
    assert options["kafka.isolation.level"] == "read_committed"


def test_ranges_are_read_exactly_read_committed_one_spark_partition_each(
        kafka: LocalKafka, spark: SparkSession) -> None:
    topic = f"jvm-{uuid.uuid4().hex[:8]}"
    create_topics(kafka.bootstrap, [(topic, 2)])
    p = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": uuid.uuid4().hex,
                  "log_level": 2})
    p.init_transactions()
    committed: dict[int, list[bytes]] = {0: [], 1: []}
    for t in range(6):  # five records and a marker per transaction and partition
        p.begin_transaction()
        for partition in (0, 1):
            for i in range(5):
                p.produce(topic, partition=partition, value=f"{partition}-{t}-{i}".encode())
        if t % 3 == 1:
            p.flush()  # written, then aborted
            p.abort_transaction()
        else:
            p.commit_transaction()
            for partition in (0, 1):
                committed[partition] += [f"{partition}-{t}-{i}".encode() for i in range(5)]
    group = f"coxswain-reader-{uuid.uuid4().hex[:8]}"
    got: dict[int, list[bytes]] = {0: [], 1: []}
    # consecutive batches whose ranges end on markers and inside aborted transactions,
    # one consumer group throughout (the executors' consumers kept between batches)
    for bounds in ((0, 5), (5, 6), (6, 14), (14, 20), (20, 36)):
        ranges: Planned = {(topic, 0): (*bounds, 4), (topic, 1): (*bounds, 7)}
        df = read_ranges(spark, kafka.bootstrap, group, ranges)
        assert df.rdd.getNumPartitions() == 2
        rows = df.collect()
        assert {(r["partition"], r["gen"]) for r in rows} <= {(0, 4), (1, 7)}
        assert all(bounds[0] <= r["offset"] < bounds[1] for r in rows)
        for partition in (0, 1):
            mine = [r for r in rows if r["partition"] == partition]
            assert [r["offset"] for r in mine] == sorted(r["offset"] for r in mine)
            got[partition] += [bytes(r["value"]) for r in mine]
    assert got == committed
    # a partition read again from an earlier offset, alone
    again = read_ranges(spark, kafka.bootstrap, group, {(topic, 1): (0, 5, 8)}).collect()
    assert [bytes(r["value"]) for r in again] == committed[1][:5]
    assert {r["gen"] for r in again} == {8}


def test_the_connector_reads_and_spark_s_sink_writes_through_sasl_ssl(
        secured_kafka: KafkaClientSettings, spark: SparkSession) -> None:
    """The librdkafka-named settings, translated (SCRAM into ``sasl.jaas.config``, the CA
    into a PEM trust store), reach the JVM's Kafka clients: ``--kafka-reader jvm`` and
    ``--api task --output-topic`` without ``--exactly-once``."""
    topic = f"jvm-secured-{uuid.uuid4().hex[:8]}"
    create_topics(secured_kafka, [(topic, 1)])
    rows = spark.createDataFrame([(f"k{i}".encode(), f"v{i}".encode()) for i in range(7)],
                                 OUTPUT_SCHEMA)
    rows.write.format("kafka").options(**secured_kafka.spark_options()) \
        .option("topic", topic).save()
    got = read_ranges(spark, secured_kafka, f"coxswain-reader-{uuid.uuid4().hex[:8]}",
                      {(topic, 0): (0, 7, 1)}).collect()
    assert sorted(bytes(r["value"]) for r in got) == [f"v{i}".encode() for i in range(7)]
