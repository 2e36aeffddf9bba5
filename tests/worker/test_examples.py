"""The example apps run as documented: on a real Spark session, on rows shaped like the
worker's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from examples.enrich_task import process_task
from examples.first_job import process_task as first_job
from examples.running_total import process_task as running_total
from examples.word_count_batch import process_batch
from worker.runtime import BatchContext, TaskContext, run_tasks
from worker.runtime.spark import spark_session
from worker.state.restore import open_live
from worker.state.snapshot import snapshot_dir
from worker.state.store import TaskStore


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    # as a worker makes it: the first session of a test process starts the one JVM
    # every later one shares (its class path: Spark's Kafka connector, which
    # tests/worker/test_jvm_kafka.py reads with)
    session = spark_session("local[1]", "examples")
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


def test_the_readmes_first_job_is_this_file_and_runs(spark: SparkSession) -> None:
    """The first job the README shows is examples/first_job.py, whole, and it runs on
    the worker's own per-task runner over orders as `coxswain dev produce` writes
    them."""
    root = Path(__file__).resolve().parents[2]
    code = (root / "examples" / "first_job.py").read_text()
    body = code[code.index("import json"):]  # (the docstring aside)
    assert body in (root / "README.md").read_text()
    assert len(body.strip().splitlines()) <= 12
    orders = [(b"customer-1", {"seq": 0, "id": "a1", "amountCents": 1250}, 0),
              (b"customer-2", {"seq": 0, "id": "b7", "amountCents": 99}, 1)]
    df = spark.createDataFrame(
        [(k, json.dumps(o).encode(), "orders", 0, off, None, 0, "Partition 0")
         for k, o, off in orders],
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, keyBucket int, taskName string")
    ctx = BatchContext("w1", 1, 0, spark, ("Partition 0",))
    out = [(bytes(r["key"]), bytes(r["value"])) for r in run_tasks(df, first_job, ctx).collect()]
    assert out == [(b"customer-1", b"a1 12.50 EUR"), (b"customer-2", b"b7 0.99 EUR")]


def test_enrich_task_keeps_keys_and_order() -> None:
    rows = pd.DataFrame({"key": [b"k1", b"k2"], "value": [b"x", b"y"], "offset": [5, 6]})
    out = process_task(TaskContext("w1", 2, "Partition 0_1_2"), rows)
    assert list(out["key"]) == [b"k1", b"k2"]
    assert [json.loads(v)["offset"] for v in out["value"]] == [5, 6]
    assert json.loads(out["value"][0])["task"] == "Partition 0_1_2"
    kinesis = pd.DataFrame({"key": [b"k1"], "value": [b"x"], "sequenceNumber": ["4" * 56]})
    out = process_task(TaskContext("w1", 1, "Partition 0"), kinesis)
    assert json.loads(out["value"][0])["sequenceNumber"] == "4" * 56


def test_running_total_keeps_per_customer_state_across_batches(
    spark: SparkSession, tmp_path: Path,
) -> None:
    """Two batches through the worker's own per-task runner with state on: the second
    batch sees the first one's totals, and each batch leaves a snapshot."""
    schema = ("key binary, value binary, topic string, partition int, offset long, "
              "timestamp timestamp, keyBucket int, taskName string")

    def batch(rows: list[tuple[bytes, float, int]], checkpoint_id: str) -> list[Any]:
        df = spark.createDataFrame(
            [(k, json.dumps({"amount": a}).encode(), "t", 0, o, None, 0, "Partition 0")
             for k, a, o in rows], schema)
        ctx = BatchContext("w1", 1, 0, spark, ("Partition 0",), str(tmp_path), checkpoint_id)
        return [json.loads(r["value"]) for r in run_tasks(df, running_total, ctx).collect()]

    open_live(tmp_path, "Partition 0", None).close()  # what the worker does at query start
    first = batch([(b"c1", 2.5, 0), (b"c2", 1.0, 1), (b"c1", 1.5, 2)], "1000-1")
    assert [r["total"] for r in first] == [2.5, 1.0, 4.0]
    second = batch([(b"c1", 10.0, 3)], "2000-2")
    assert second == [{"customer": "c1", "orders": 3, "total": 14.0}]
    for checkpoint_id, c1_total in (("1000-1", 4.0), ("2000-2", 14.0)):
        with TaskStore(snapshot_dir(tmp_path, "Partition 0", checkpoint_id)) as snap:
            assert snap.get(b"c1", "total") == c1_total


def test_state_without_stateful_says_how_to_get_it() -> None:
    with pytest.raises(RuntimeError, match="--stateful"):
        running_total(TaskContext("w1", 1, "Partition 0"),
                      pd.DataFrame({"key": [b"k"], "value": [b"{}"]}))
