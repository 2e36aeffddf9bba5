"""``process_task`` on a real Spark session: one call per virtual task, rows in offset
order, and each task on its own Spark partition so tasks run in parallel."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pandas as pd
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812

from worker.runtime import BatchContext, TaskContext, place_tasks, run_tasks, spark_session

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, keyBucket int, taskName string")
TASKS = [f"Partition {p}_{b}_4" for p in range(2) for b in range(4)]


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[4]", "task-api")  # Python workers run this interpreter
    yield session
    session.stop()


def batch(spark: SparkSession, rows_per_task: int = 50) -> DataFrame:
    rows = []
    for task in TASKS:
        partition, bucket = (int(x) for x in task.split()[1].split("_")[:2])
        for i in range(rows_per_task):
            offset = 1000 * bucket + i
            rows.append((f"k{i}".encode(), str(offset).encode(), "orders", partition,
                         offset, None, bucket, task))
    random.Random(7).shuffle(rows)
    return spark.createDataFrame(rows, SCHEMA).repartition(3)


def echo(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """One output row per call: the task and the offsets it saw, in order."""
    return pd.DataFrame({"key": [ctx.task_name],
                         "value": [json.dumps({"version": ctx.version,
                                               "offsets": [int(o) for o in rows["offset"]]})]})


def test_each_task_is_called_once_with_its_rows_in_offset_order(spark: SparkSession) -> None:
    ctx = BatchContext("w1", 5, 0, spark, tuple(TASKS))
    out = {bytes(r["key"]).decode(): json.loads(r["value"])
           for r in run_tasks(batch(spark), echo, ctx).collect()}
    assert sorted(out) == sorted(TASKS)
    for task, seen in out.items():
        bucket = int(task.split()[1].split("_")[1])
        assert seen == {"version": 5, "offsets": [1000 * bucket + i for i in range(50)]}


def test_each_task_gets_its_own_spark_partition(spark: SparkSession) -> None:
    ctx = BatchContext("w1", 5, 0, spark, tuple(TASKS))
    placed = place_tasks(batch(spark), ctx).withColumn("part", F.spark_partition_id())
    parts = placed.groupBy("taskName").agg(F.collect_set("part").alias("parts")).collect()
    owners = {r["taskName"]: r["parts"] for r in parts}
    assert all(len(p) == 1 for p in owners.values())
    assert sorted(p[0] for p in owners.values()) == list(range(len(TASKS)))


def test_tasks_beyond_the_partition_cap_share_partitions_but_keep_order(
    spark: SparkSession
) -> None:
    # local[4] allows 64 partitions: 8 listed tasks are placed on 8; ask for 100 names so
    # the cap (16 per core) is exceeded and indices wrap round-robin
    names = tuple(TASKS) + tuple(f"Partition 9_{b}_128" for b in range(92))
    ctx = BatchContext("w1", 5, 0, spark, names)
    placed = place_tasks(batch(spark), ctx)
    assert placed.rdd.getNumPartitions() == 64
    out = {bytes(r["key"]).decode(): json.loads(r["value"])["offsets"]
           for r in run_tasks(batch(spark), echo, ctx).collect()}
    assert sorted(out) == sorted(TASKS)
    assert all(offsets == sorted(offsets) and len(offsets) == 50 for offsets in out.values())
