"""``process_task`` on a real Spark session: one call per virtual task, rows in offset
order, and each task on its own Spark partition so tasks run in parallel."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812

from coordinator.bucket_signals import bucket_signals
from grouping.key_bucket import key_bucket
from grouping.key_hash import KeyHash
from tests.grouping.partitioners import crc32
from worker.plan import QueryPlan, Skip, SspStart
from worker.runtime import BatchContext, TaskContext, place_tasks, run_tasks, spark_session
from worker.runtime.bucket_counts import BucketCounts, TaskRows, count_buckets, owned_counts
from worker.runtime.spark import FS_CHECKPOINTS
from worker.runtime.task_api import placed_by_reads

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
    # local[4] allows 8 partitions: 8 listed tasks are placed on 8; ask for 100 names so
    # the cap (2 per core) is exceeded and indices wrap round-robin
    names = tuple(TASKS) + tuple(f"Partition 9_{b}_128" for b in range(92))
    ctx = BatchContext("w1", 5, 0, spark, names)
    placed = place_tasks(batch(spark), ctx)
    assert placed.rdd.getNumPartitions() == 8
    out = {bytes(r["key"]).decode(): json.loads(r["value"])["offsets"]
           for r in run_tasks(batch(spark), echo, ctx).collect()}
    assert sorted(out) == sorted(TASKS)
    assert all(offsets == sorted(offsets) and len(offsets) == 50 for offsets in out.values())


def test_tasks_placed_by_the_reads_run_where_they_were_read(spark: SparkSession) -> None:
    """A Kafka batch's reads put each Kafka partition's records in one Spark partition:
    run there (no shuffle), each task still called once with its rows in order."""
    read = batch(spark).repartition(2, "partition")  # as the source's readers would
    ctx = BatchContext("w1", 5, 0, spark, tuple(TASKS), tasks_placed=True)
    result = run_tasks(read, echo, ctx)
    assert result.rdd.getNumPartitions() == 2
    out = {bytes(r["key"]).decode(): json.loads(r["value"])["offsets"]
           for r in result.collect()}
    assert sorted(out) == sorted(TASKS)
    for task, offsets in out.items():
        bucket = int(task.split()[1].split("_")[1])
        assert offsets == [1000 * bucket + i for i in range(50)]


def test_a_batch_runs_where_read_only_when_a_shuffle_would_not_run_more_at_once() -> None:
    assert placed_by_reads(readers=2, tasks_with_rows=8, cores=2)  # the reads fill the cores
    assert placed_by_reads(readers=2, tasks_with_rows=2, cores=8)  # one task per read
    assert not placed_by_reads(readers=2, tasks_with_rows=8, cores=8)  # 8 could run at once
    assert not placed_by_reads(readers=0, tasks_with_rows=1, cores=1)  # reads not known
    # a task with rows of two Kafka partitions (two topics' partition 0): two readers
    # may each have some, and the task would run twice at once
    assert not placed_by_reads(readers=2, tasks_with_rows=2, cores=2, partitions_per_task=2)


@pytest.mark.parametrize("key_hash", list(KeyHash))
def test_the_query_filter_keeps_each_bucket_from_its_own_start(spark: SparkSession,
                                                               key_hash: KeyHash) -> None:
    """Evaluated by Spark: a worker owning buckets 0 (start 100) and 1 (start 120) of a
    partition reads it from 100, and must drop bucket 1's records below 120 (processed
    and committed already: the duplicates a test once saw when a worker took over a
    slower bucket next to its own), plus records below a skip watermark and of buckets
    it does not own."""
    plan = QueryPlan(5, 2, (SspStart("Partition 0_0_2", "orders", 0, 0, 100),
                            SspStart("Partition 0_1_2", "orders", 0, 1, 120)),
                     (Skip("orders", 0, 4, 2, 130),), key_hash=key_hash)
    keys = {b: next(k for i in range(1000)
                    if key_bucket(k := f"k{i}".encode(), 0, 4, key_hash) == b) for b in range(4)}
    rows = [(keys[b4], str(o).encode(), "orders", 0, o, None, b4 % 2, "")
            for o in range(90, 140) for b4 in range(4)]
    df = spark.createDataFrame(rows, SCHEMA).withColumn(
        "keyBucket", F.expr(plan.bucket_expr()))
    kept = {(r["keyBucket"], r["offset"], key_bucket(bytes(r["key"]), 0, 4, key_hash))
            for r in df.where(plan.filter_sql()).collect()}
    expected = {(b4 % 2, o, b4) for o in range(90, 140) for b4 in range(4)
                if o >= (100 if b4 % 2 == 0 else 120) and not (b4 == 2 and o < 130)}
    assert kept == expected


def test_a_worker_sessions_query_logs_go_through_the_filesystem_api(
        spark: SparkSession, tmp_path: Path) -> None:
    """The offset and commit logs of a worker's query are written through Hadoop's
    FileSystem API (the FileContext one forks `readlink` at every rename), whole: the
    worker reads a batch's offsets from them."""
    assert spark.conf.get("spark.sql.streaming.checkpointFileManagerClass") == FS_CHECKPOINTS
    query = (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "q"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "q" / "commits" / "2").exists():
            assert time.monotonic() < deadline, query.lastProgress
            time.sleep(0.1)
    finally:
        query.stop()
    lines = (tmp_path / "q" / "offsets" / "2").read_text().splitlines()
    assert lines[0] == "v1" and json.loads(lines[1])["batchWatermarkMs"] == 0
    assert not list((tmp_path / "q").rglob("*.tmp"))  # renamed into place, nothing left


@pytest.mark.parametrize("key_hash", list(KeyHash))
def test_the_key_hash_is_bit_identical_in_spark_sql_and_python(spark: SparkSession,
                                                               key_hash: KeyHash) -> None:
    """The workers' filter computes buckets in the JVM (``QueryPlan.bucket_expr``); the
    checkpoint math and state split/compose compute them in Python: random binary keys
    (empty, every length 1-7, long, not UTF-8) get the same bucket under every factor."""
    rng = random.Random(20261128)
    keys = [b"", b"hello", b"\xff\xfe\x80\x00",
            *(rng.randbytes(n) for n in range(1, 8) for _ in range(30)),
            *(rng.randbytes(rng.randint(8, 2000)) for _ in range(200))]
    plan = QueryPlan(1, 64, (), key_hash=key_hash)
    rows = [(k, b"", "t", 0, i, None, 0, "") for i, k in enumerate(keys)]
    df = spark.createDataFrame(rows, SCHEMA)
    got = df.select("key", "offset", *(F.expr(plan.bucket_expr(f)).alias(f"b{f}")
                                       for f in (2, 8, 64))).collect()
    assert len(got) == len(keys)
    for r in got:
        key = bytes(r["key"])
        for f in (2, 8, 64):
            assert r[f"b{f}"] == key_bucket(key, r["offset"], f, key_hash), (key, f)


@pytest.mark.parametrize(("key_hash", "empty"), [(KeyHash.CRC32, 12), (KeyHash.XXHASH64, 0)])
def test_bucket_counts_of_a_default_partitioned_topic_show_empty_buckets_only_for_crc32(
        spark: SparkSession, key_hash: KeyHash, empty: int) -> None:
    """A worker's sampled bucket counts (a Spark job over the batch, in the JVM) of a
    4-partition topic written by librdkafka's default partitioner, judged by the leader's
    rule at factor 4: crc32 leaves 3 of each partition's 4 buckets empty."""
    keys = [f"user-{i}".encode() for i in range(8000)]
    rows = [(k, b"0", "clicks", crc32(k, 4), i, None, 0, "") for i, k in enumerate(keys)]
    plan = QueryPlan(1, 4, (), key_hash=key_hash)
    counts = BucketCounts(1.0, clock=lambda: 0.0)
    assert counts.due(4) and not counts.due(1)
    counted = count_buckets(spark.createDataFrame(rows, SCHEMA), plan)
    counts.add(plan, counted, {k: sum(v.values()) for k, v in counted.items()})
    report = counts.report()
    assert report is not None and report["factor"] == 4
    assert sum(map(sum, report["partitions"].values())) == len(keys)
    found = bucket_signals({"w1": {"keyBucketCounts": report}}, 4)
    assert sum(len(e["emptyBuckets"]) for e in found.empty) == empty
    assert found.partitions == 4 and not counts.due(4)  # the next one after the interval


def test_tasks_count_their_rows_in_the_batchs_own_spark_job(spark: SparkSession) -> None:
    """``process_task`` workers' key-bucket counts: each Spark task adds its tasks' rows
    to an accumulator as it runs them, in the one job that processes the batch."""
    rows = spark.sparkContext.accumulator({}, TaskRows())

    def jobs(counted: bool) -> int:
        ctx = BatchContext("w1", 5, 0, spark, tuple(TASKS),
                           task_rows=rows if counted else None)
        group = f"counted-{counted}-{time.monotonic_ns()}"
        spark.sparkContext.setJobGroup(group, "a batch")
        try:
            run_tasks(batch(spark, rows_per_task=30), echo, ctx).collect()
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        return len(spark.sparkContext.statusTracker().getJobIdsForGroup(group))

    assert jobs(True) == jobs(False)  # no Spark job of its own
    assert rows.value == dict.fromkeys(TASKS, 30)
    # the plan's tasks: partition 0's buckets 0 and 1 (bucket 1's rows are another
    # worker's here); partition 1 had no records in the batch
    plan = QueryPlan(5, 4, tuple(SspStart(f"Partition 0_{b}_4", "orders", 0, b, 0)
                                 for b in (0, 1)))
    assert owned_counts(plan, {"Partition 0_0_4": 30}, {("orders", 0)}) == {
        ("orders", 0): {0: 30, 1: 0}}
    assert owned_counts(plan, {"Partition 0_0_4": 30}, {("orders", 1)}) == {}
