"""A worker's batch path run once on no records before it registers: a warm first batch.

A newcomer's first batch with records took 2.8-3.8 s where its next ones took 0.6-1.4 s
(``bench.stateful --only scale-out``, 100 MB, quiet), and that batch is the moved tasks'
output gap. Profiles of it (JFR on the driver's JVM, py-spy on its Python processes)
found the time spread over first-time work, none of it the records': the JVM compiling
the batch path's hot code (C2 compilations of over a second in all), parsing the batch's
SQL expressions with a cold ANTLR cache, generating and compiling code for its stages,
a Kafka producer for the output; the Python workers importing the task runner's modules.

Running the same path once (the batch's expressions, the placement shuffle, the tasks'
``mapInPandas``, the output's Kafka sink) for two made-up tasks, over a row per core of the
source's columns that the batch's filter drops, does all of that while the worker starts,
before it holds any task; then the path of a batch whose runners read its ranges
themselves (``worker.runtime.task_reads``), over no range. No task runs
(``process_task`` is called for tasks with rows only), nothing is read or written, no
state is opened, nothing is committed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from common.kafka_clients import KafkaClientSettings
from grouping.key_hash import KeyHash
from worker.plan import QueryPlan, SspStart
from worker.runtime.contexts import COLUMNS, BatchContext, ProcessBatch
from worker.runtime.task_reads import Routes, TaskReads
from worker.sources.kafka import SCHEMA, KafkaRead

#: the made-up input the warm-up's tasks "read" (no such topic is read or written)
TOPIC = "coxswain-warm-up"


def warm_batch_path(spark: SparkSession, process: ProcessBatch, processor_id: str,
                    key_hash: KeyHash, collect: Callable[[Any], None] | None = None,
                    kafka: KafkaClientSettings | None = None) -> float:
    """Run ``process`` (a ``process_task`` app's) once on a Kafka batch that keeps no
    record, as a batch of the worker's would; the seconds it took. ``collect``: an
    exactly-once worker's (its batches' output is collected for the commit's
    transaction, not written by Spark's Kafka sink), given the warm-up's (empty) output.
    ``kafka``: the worker's brokers, when its task runners read their batches' ranges
    (then that path is run too, over no range: nothing is read)."""
    started = time.monotonic()
    cores = max(1, spark.sparkContext.defaultParallelism)
    tasks = tuple(f"{TOPIC} {i}" for i in range(2))
    plan = QueryPlan(0, 2, tuple(SspStart(t, TOPIC, 0, i, 0) for i, t in enumerate(tasks)),
                     key_hash=key_hash)
    # a row per core that the batch's filter drops at run time: an input Spark can tell
    # is empty while planning (no rows, or constant columns the filter folds to false)
    # has its every stage optimized away
    columns = [c.strip().split(" ", 1) for c in SCHEMA.split(",")]
    dropped = spark.range(0, cores, 1, cores).selectExpr(
        *(f"CAST(CAST(id AS STRING) AS {kind}) AS `{name}`" for name, kind in columns))
    # (the batch's own expressions: ``BatchRunner._run``)
    mine = (dropped.selectExpr("*", f"{plan.bucket_expr()} AS keyBucket")
            .where(plan.filter_sql())
            .selectExpr(*(f"{plan.task_sql()} AS taskName" if c == "taskName" else f"`{c}`"
                          for c in COLUMNS)))
    # a streaming query's batches run without adaptive execution (which would also see
    # that no row is kept and skip the stages this is for)
    adaptive = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        process(mine, BatchContext(processor_id, 0, -1, spark, tasks, collect=collect,
                                   key_hash=key_hash))
        if kafka is not None:
            reads = TaskReads((KafkaRead(()),) * cores, kafka, Routes.of(plan),
                              str(spark.conf.get("spark.sql.session.timeZone")))
            process(mine, BatchContext(processor_id, 0, -1, spark, tasks, tasks_placed=True,
                                       collect=collect, key_hash=key_hash, reads=reads))
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", adaptive or "true")
    return time.monotonic() - started


__all__ = ["warm_batch_path"]
