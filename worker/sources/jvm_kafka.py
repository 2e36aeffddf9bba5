"""Reading a planned Kafka batch with Spark's own (JVM) Kafka connector instead of the
Python source's consumers (``coxswain worker --kafka-reader jvm``).

The worker's one query still plans every batch with Coxswain's source
(``worker.sources.kafka``: the source plan, the broker's stable ends, the batch size), so
a handover stays a batch boundary without a query restart. Only the reading changes: the
batch's ranges, from the query's offset log, are read by a batch query of Spark's Kafka
connector over exactly those offsets, one Spark task per Kafka partition, with no Python
process between the broker and Spark's rows; the streaming source's own rows are never
computed (Spark evaluates a ``foreachBatch`` DataFrame only when it is used).

Which reader is faster depends on the job (bench/RESULTS.md, "The JVM Kafka reader"):
the JVM one hands rows to Python only once, where the user's code runs; the Python one
reads with a consumer that prefetched, in as many Spark tasks as there are cores.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

from common.kafka_clients import Brokers, settings_of
from worker.plan import sql_string
from worker.sources.source_plan import split_key

#: (topic, partition) -> (from, to, source generation) of a batch's ranges with records
Planned = dict[tuple[str, int], tuple[int, int, int]]


def planned_ranges(offsets: Mapping[str, Any]) -> Planned:
    """The ranges with records of a batch's source offsets (``worker.sources.kafka``)."""
    found: Planned = {}
    for key, r in (offsets.get("p") or {}).items():
        start, end = int(r["from"]), int(r["to"])
        if end > start:
            found[split_key(key)] = (start, end, int(r.get("g") or 0))
    return found


def connector_options(ranges: Planned
                      ) -> dict[str, str]:
    """Spark Kafka connector options reading exactly ``ranges`` (at least one)."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for (topic, partition), (start, end, _) in sorted(ranges.items()):
        assign.setdefault(topic, []).append(partition)
        starting.setdefault(topic, {})[str(partition)] = start
        ending.setdefault(topic, {})[str(partition)] = end
    return {"assign": json.dumps(assign), "startingOffsets": json.dumps(starting),
            "endingOffsets": json.dumps(ending),
            # the ends are the broker's last stable offsets: below them a read-committed
            # consumer skips aborted records and transaction markers, as the Python
            # source's consumers do (the connector knows such gaps from lost records)
            "kafka.isolation.level": "read_committed"}


def read_ranges(spark: SparkSession, bootstrap: Brokers, group_id: str,
                ranges: Planned) -> DataFrame:
    """The records of ``ranges`` with the Python source's columns (``gen``: the range's
    source generation), one Spark partition per Kafka partition, in offset order.

    ``group_id`` is one per worker: the connector's executors keep a consumer per group
    and partition, so every batch reuses the last one's (Spark names each batch query's
    group anew otherwise). No group is joined and nothing is committed: the consumers
    are assigned their partitions, and Coxswain's checkpoints say where tasks start."""
    reader = spark.read.format("kafka").option("kafka.group.id", group_id)
    for key, value in settings_of(bootstrap).spark_options().items():
        reader = reader.option(key, value)
    for key, value in connector_options(ranges).items():
        reader = reader.option(key, value)
    gens = "CASE " + " ".join(
        f"WHEN topic = {sql_string(t)} AND partition = {p} THEN {g}"
        for (t, p), (_, _, g) in sorted(ranges.items())) + " ELSE 0 END"
    return reader.load().select("key", "value", "topic", "partition", "offset", "timestamp",
                                F.expr(gens).cast("int").alias("gen"))


def quiet_group_warning(spark: SparkSession) -> None:
    """Spark warns at every batch query that names ``kafka.group.id`` (about concurrent
    queries of one group, which committed offsets would confuse): Coxswain's reading
    commits none and joins no group, so the warning says nothing here."""
    jvm: Any = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.ERROR
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.kafka010.KafkaSourceProvider", level)

