"""The batch path run once before a worker takes tasks, on a real Spark session and
Kafka broker: every stage of a batch runs (none optimized away for its empty input), the
app's ``process_task`` is never called, and nothing reaches the output topic."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from grouping.key_hash import DEFAULT_KEY_HASH
from service.local.kafka import LocalKafka
from worker.runtime import TaskContext, spark_session
from worker.runtime.task_api import task_api
from worker.runtime.warm_up import warm_batch_path


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]", "warm-up")
    yield session
    session.stop()


def never(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    raise AssertionError(f"process_task called for {ctx.task_name} with {len(rows)} rows")


def test_the_warm_up_runs_every_stage_and_no_task(spark: SparkSession,
                                                  kafka: LocalKafka) -> None:
    topic = f"warm-{uuid.uuid4().hex[:8]}"
    group = f"warm-up-{uuid.uuid4().hex[:8]}"
    spark.sparkContext.setJobGroup(group, "the warm-up under test")
    try:
        warm_batch_path(spark, task_api(never, topic, kafka.bootstrap), "w1",
                        DEFAULT_KEY_HASH, kafka=kafka.client_settings())
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    tracker = spark.sparkContext.statusTracker()
    stages = [s for j in tracker.getJobIdsForGroup(group)
              for s in tracker.getJobInfo(j).stageIds]  # type: ignore[union-attr]
    # the placement's shuffle, then the tasks' mapInPandas and the Kafka sink; then the
    # runners reading their (no) ranges, a Spark task per core
    assert len(stages) >= 3
    assert all(tracker.getStageInfo(s).numTasks > 0 for s in stages)  # type: ignore[union-attr]
    assert tracker.getStageInfo(max(stages)).numTasks == 2  # type: ignore[union-attr]
    # no record written: the sink never even made the topic
    topics = AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10)
    assert topic not in topics.topics
    # adaptive execution as it was (off only while the warm-up ran, as in a query)
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"


def test_an_exactly_once_workers_warm_up_collects_its_empty_output(
        spark: SparkSession, kafka: LocalKafka) -> None:
    """Its batches' output goes to the commit's transaction, not Spark's Kafka sink: the
    warm-up takes the same path, handing over an output with no row."""
    topic = f"warm-{uuid.uuid4().hex[:8]}"
    collected: list[Any] = []
    warm_batch_path(spark, task_api(never, topic, kafka.bootstrap), "w1", DEFAULT_KEY_HASH,
                    collected.append, kafka.client_settings())
    assert [t.num_rows for t in collected] == [0, 0]  # (both paths)
    assert collected[0].column_names == ["key", "value"]
