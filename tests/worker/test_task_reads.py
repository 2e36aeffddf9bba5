"""A batch's tasks reading their own Kafka ranges (``worker.runtime.task_reads``): the
rows and the tasks they go to are the ones the batch's SQL keeps, with the dtypes PySpark
hands ``mapInPandas``, on a real Spark session; and the runners read real Kafka ranges,
each record once, to its task, in offset order."""

from __future__ import annotations

import pickle
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa  # type: ignore[import-untyped]
import pytest
from confluent_kafka import Producer
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from grouping.key_bucket import key_bucket
from grouping.key_hash import KeyHash
from service.local.kafka import LocalKafka
from service.local.orders import create_topics
from worker.plan import EARLIEST, LATEST, QueryPlan, Skip, SspStart
from worker.runtime import TaskContext, spark_session
from worker.runtime.contexts import COLUMNS, BatchContext
from worker.runtime.task_api import run_in_driver, run_tasks
from worker.runtime.task_reads import Routes, TaskReads, _frame, split_reads
from worker.sources.kafka import KafkaRange, _batch, ranges_of, reads_of


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]", "task-reads")
    yield session
    session.stop()


def _plan(rng: random.Random, topic: str, partitions: int) -> QueryPlan:
    """A random worker's plan: some partitions whole (F=1) or some of their buckets,
    each from its own start, and skip watermarks of an older factor."""
    factor = rng.choice([1, 2, 4, 8])
    starts: list[SspStart] = []
    skips: list[Skip] = []
    for p in range(partitions):
        if rng.random() < 0.2:
            continue  # a partition this worker runs no task of
        if factor == 1:
            starts.append(SspStart(f"Partition {p}", topic, p, -1,
                                   rng.choice([EARLIEST, LATEST, rng.randrange(0, 60)])))
            continue
        for b in rng.sample(range(factor), rng.randint(1, factor)):
            start = rng.choice([EARLIEST, LATEST, rng.randrange(0, 60), rng.randrange(0, 60)])
            starts.append(SspStart(f"Partition {p} bucket {b}", topic, p, b, start))
        if rng.random() < 0.5:
            older = factor * 2
            skips.append(Skip(topic, p, older, rng.randrange(older), rng.randrange(0, 60)))
    return QueryPlan(7, factor, tuple(starts), tuple(skips),
                     key_hash=rng.choice([KeyHash.XXHASH64, KeyHash.CRC32]))


def _records(rng: random.Random, topic: str, p: int, n: int) -> Any:
    """An Arrow batch of the source's columns: ``n`` records from offset 0, some keys
    null, every value bytes, one timestamp a millisecond apart."""
    keys = [None if rng.random() < 0.1 else f"key-{rng.randrange(500)}".encode()
            for _ in range(n)]
    values: list[bytes | None] = [f"v{i}".encode() for i in range(n)]
    stamps = [1_700_000_000_000 + i for i in range(n)]
    return _batch(pa, KafkaRange(topic, p, 0, n, 3), keys, values, list(range(n)), stamps)


def _captured(rows: Iterator[pd.DataFrame], folder: str) -> Iterator[pd.DataFrame]:
    """(``mapInPandas``) keep every frame PySpark hands the function, as it is."""
    for frame in rows:
        with open(Path(folder) / uuid.uuid4().hex, "wb") as f:
            pickle.dump(frame, f)
        yield pd.DataFrame({"n": [len(frame)]})


def test_routes_keep_and_name_what_the_batch_sql_does(spark: SparkSession,
                                                      tmp_path: Path) -> None:
    """For random plans (factors, buckets from their own starts, whole partitions, skip
    watermarks, both key hashes) and records with null keys: the rows the batch's SQL
    keeps, their buckets and task names, and the dtypes PySpark hands ``mapInPandas``,
    are exactly what :class:`Routes` gives for the same Arrow batches."""
    rng = random.Random(52_48)
    topic = "in"
    zone = str(spark.conf.get("spark.sql.session.timeZone"))
    for case in range(12):
        plan = _plan(rng, topic, 3)
        batches = [_records(rng, topic, p, 60) for p in range(3)]
        folder = tmp_path / f"case-{case}"
        folder.mkdir()
        # the SQL path: as ``BatchRunner._run`` builds a batch's rows
        source = spark.createDataFrame(pa.Table.from_batches(batches).drop_columns(["gen"]))
        mine = source.selectExpr("*", f"{plan.bucket_expr()} AS keyBucket") \
            .where(plan.filter_sql()) \
            .selectExpr(*(f"{plan.task_sql()} AS taskName" if c == "taskName" else f"`{c}`"
                          for c in COLUMNS))
        def capture(rows: Iterator[pd.DataFrame], d: str = str(folder)
                    ) -> Iterator[pd.DataFrame]:
            return _captured(rows, d)

        mine.coalesce(1).mapInPandas(capture, "n long").collect()
        frames = [pickle.loads(f.read_bytes()) for f in sorted(folder.iterdir())]
        by_sql = pd.concat(frames, ignore_index=True) if frames else None
        routes = Routes.of(plan)
        routed = pd.concat([routes.route(topic, p, _frame(b, zone)) for p, b in
                            enumerate(batches)], ignore_index=True)
        if by_sql is None or not len(by_sql):
            assert not len(routed), f"case {case}: {plan}"
            continue
        order = ["partition", "offset"]
        pd.testing.assert_frame_equal(
            routed.sort_values(order, ignore_index=True),
            by_sql.sort_values(order, ignore_index=True), obj=f"case {case}: {plan}")


def test_routes_refuse_kinesis_plans() -> None:
    with pytest.raises(ValueError, match="kinesis"):
        Routes.of(QueryPlan(1, 1, (), system="kinesis"))


def _seen(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """(``process_task``) one output record per row: task, partition, offset, bucket,
    timestamp in ms."""
    return pd.DataFrame({"key": [ctx.task_name.encode()] * len(rows), "value": [
        f"{p} {o} {b} {int(t.timestamp() * 1000)}".encode() for p, o, b, t in zip(
            rows["partition"], rows["offset"], rows["keyBucket"], rows["timestamp"],
            strict=True)]})


@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(0, 8)), min_size=1, max_size=6),
       st.integers(1, 16))
def test_split_reads_run_every_task_once_over_at_most_the_readers(
        partitions: list[tuple[int, int]], readers: int) -> None:
    ranges = [KafkaRange("t", p, 10, 10 + n) for p, (n, _) in enumerate(partitions)]
    tasks_of = {("t", p): [f"P{p} b{b}" for b in range(k)] for p, (_, k) in enumerate(partitions)}
    reads, shares = split_reads(ranges, tasks_of, readers)
    assert len(reads) == len(shares)
    # every range read whole, by at least one Spark task and by no more than its tasks
    by_range: dict[int, list[frozenset[str]]] = {}
    for read, share in zip(reads, shares, strict=True):
        (r,) = read.ranges
        assert r in ranges
        by_range.setdefault(r.partition, []).append(share)
    assert set(by_range) == set(range(len(ranges)))
    for p, got in by_range.items():
        tasks = tasks_of[("t", p)]
        assert len(got) <= max(1, len(tasks))
        # each of the partition's tasks in exactly one share, no share empty but for a
        # partition with no task; the shares within one task of each other in size
        listed = [t for share in got for t in share]
        assert sorted(listed) == sorted(tasks)
        assert all(got) or not tasks
        assert max(map(len, got)) - min(map(len, got)) <= 1
    # as many Spark tasks as asked for, where the tasks allow it
    assert len(reads) == max(len(ranges), min(readers, sum(max(1, k) for _, k in partitions)))


def test_split_reads_give_extra_readers_to_the_most_records_per_reader() -> None:
    ranges = [KafkaRange("t", 0, 0, 9000), KafkaRange("t", 1, 0, 1000)]
    tasks_of = {("t", p): [f"P{p} b{b}" for b in range(4)] for p in range(2)}
    reads, shares = split_reads(ranges, tasks_of, 4)
    assert [r.ranges[0].partition for r in reads] == [0, 0, 0, 1]
    assert shares[:3] == (frozenset({"P0 b0", "P0 b3"}), frozenset({"P0 b1"}),
                          frozenset({"P0 b2"}))


@pytest.mark.parametrize("in_driver", [False, True], ids=["spark", "driver"])
@pytest.mark.parametrize("split", [False, True], ids=["as-planned", "split"])
def test_runners_read_real_ranges_each_record_once_to_its_task_in_order(
        spark: SparkSession, kafka: LocalKafka, split: bool, in_driver: bool) -> None:
    """... in Spark tasks, and in the driver, which runs a small batch itself
    (``task_api.run_in_driver``) exactly as they would."""
    topic = f"reads-{uuid.uuid4().hex[:8]}"
    create_topics(kafka.client_settings(), [(topic, 2)])
    producer = Producer(kafka.client_settings().client({"acks": "all", "log_level": 2}))
    sent: dict[tuple[int, int], tuple[bytes | None, int]] = {}
    for i in range(400):
        key = None if i % 17 == 0 else f"user-{i % 41}".encode()
        producer.produce(topic, key=key, value=b"x", partition=i % 2,
                         timestamp=1_700_000_000_000 + i,
                         on_delivery=lambda err, m: sent.__setitem__(
                             (int(m.partition() or 0), int(m.offset() or 0)),
                             (m.key(), m.timestamp()[1])))
    producer.flush(30)
    assert len(sent) == 400
    # F=2: both buckets of partition 0 from the start, bucket 1 of partition 1 from 50
    plan = QueryPlan(3, 2, (SspStart("a", topic, 0, 0, EARLIEST),
                            SspStart("b", topic, 0, 1, 0),
                            SspStart("c", topic, 1, 1, 50)), key_hash=KeyHash.XXHASH64)
    offsets = {"v": 1, "r": 2, "p": {f"{topic}/0": {"from": 0, "to": 200, "g": 1},
                                     f"{topic}/1": {"from": 0, "to": 200, "g": 1}}}
    zone = str(spark.conf.get("spark.sql.session.timeZone"))
    if split:  # partition 0's range read twice, once for a, once for b
        groups, shares = split_reads(ranges_of(offsets),
                                     {(topic, 0): ["a", "b"], (topic, 1): ["c"]}, 4)
        reads = TaskReads(groups, kafka.client_settings(), Routes.of(plan), zone, shares)
        assert shares == (frozenset("a"), frozenset("b"), frozenset("c"))
    else:
        reads = TaskReads(tuple(reads_of(offsets)), kafka.client_settings(),
                          Routes.of(plan), zone)
        assert len(reads.groups) == 2
    ctx = BatchContext("w0", 3, 0, spark, ("a", "b", "c"), tasks_placed=True, reads=reads,
                       in_driver=in_driver)
    # (the DataFrame handed over is not read: the runners read the ranges)
    out = [row for frame in run_in_driver(_seen, ctx) for row in frame.to_dict("records")] \
        if in_driver else run_tasks(spark.range(0), _seen, ctx).collect()
    got: dict[tuple[int, int], tuple[str, int, int]] = {}
    per_task: dict[str, list[int]] = {}
    for row in out:
        p, o, b, ms = (int(x) for x in row["value"].split())
        assert (p, o) not in got, f"record {p}:{o} processed twice"
        got[(p, o)] = (row["key"].decode(), b, ms)
        per_task.setdefault(row["key"].decode(), []).append(o)
    wanted = {}
    for (p, o), (key, ms) in sent.items():
        b = key_bucket(key, o, 2, KeyHash.XXHASH64)
        task = {(0, 0): "a", (0, 1): "b", (1, 1): "c"}.get((p, b))
        if task is not None and not (p == 1 and o < 50):
            wanted[(p, o)] = (task, b, ms)
    assert got == wanted
    assert all(offs == sorted(offs) for offs in per_task.values())
