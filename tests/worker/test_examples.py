"""The example apps run as documented: on a real Spark session, on rows shaped like the
worker's."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from examples.enrich_task import process_task
from examples.word_count_batch import process_batch
from worker.runtime import BatchContext, TaskContext


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = (SparkSession.builder.master("local[1]").appName("examples")
               .config("spark.ui.enabled", "false").getOrCreate())
    yield session
    session.stop()


def test_word_count_batch_prints_the_top_keys(
    spark: SparkSession, capsys: pytest.CaptureFixture[str]
) -> None:
    df = spark.createDataFrame(
        [(b"a", b"1", "t", 0, i, None, 0, "Partition 0") for i in range(3)]
        + [(b"b", b"1", "t", 0, 9, None, 0, "Partition 0")],
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, keyBucket int, taskName string")
    process_batch(df, BatchContext("w1", 3, 7, spark))
    assert "[w1 v3 batch 7] a=3, b=1" in capsys.readouterr().out


def test_enrich_task_keeps_keys_and_order() -> None:
    rows = pd.DataFrame({"key": [b"k1", b"k2"], "value": [b"x", b"y"], "offset": [5, 6]})
    out = process_task(TaskContext("w1", 2, "Partition 0_1_2"), rows)
    assert list(out["key"]) == [b"k1", b"k2"]
    assert [json.loads(v)["offset"] for v in out["value"]] == [5, 6]
    assert json.loads(out["value"][0])["task"] == "Partition 0_1_2"
