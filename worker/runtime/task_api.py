"""The ``process_task`` API: user code called for each virtual task of each batch, with
that task's rows in offset order (in pieces when the batch can be cut, ``worker.cuts``),
tasks in parallel (SEP-32: parallelism beyond partitions, order within a key), and the
rows it returns written to Kafka."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)
from pyspark.sql.types import BinaryType, StructField, StructType

from common.kafka_clients import Brokers, settings_of
from grouping.key_hash import KeyHash
from worker.cuts import CutPlan, piece_bounds
from worker.plan import sql_string
from worker.python_workers import keep_unfrozen, settle
from worker.runtime.contexts import BatchContext, ProcessBatch, ProcessTask, TaskContext
from worker.runtime.task_reads import TaskReads
from worker.sources.kafka_consumers import pool
from worker.state.executor import ExecutorStatePlan, executor_task_state
from worker.state.store import TaskStore
from worker.state.tasks import task_state

if TYPE_CHECKING:
    from worker.output.driver_kafka import DriverOutput

log = logging.getLogger("coxswain.worker")

#: (a StructType, not DDL: a DDL string is parsed in the driver's JVM on every batch)
OUTPUT_SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])


def task_api(fn: ProcessTask, output_topic: str | None, kafka_bootstrap: Brokers
             ) -> ProcessBatch:
    """``process_batch`` running ``fn`` for each virtual task of each batch, in parallel
    across tasks and with each task's rows in offset order (SEP-32: parallelism beyond
    partitions, order within a key). Rows ``fn`` returns (columns ``key``, ``value``: bytes
    or str) go to ``output_topic``."""
    # (the driver's: Spark's Python workers import this module and never need it)
    from worker.output.driver_kafka import DriverOutput  # noqa: PLC0415

    sink = settings_of(kafka_bootstrap).spark_options()  # (checked here, at start)
    # a small batch run in the driver writes its output itself (made at its first)
    driver_output = DriverOutput(settings_of(kafka_bootstrap), output_topic) \
        if output_topic else None

    def process_batch(df: DataFrame, ctx: BatchContext) -> None:
        if ctx.warm_up_driver is not None and ctx.reads is not None:
            threading.Thread(target=warm_up_driver, name="coxswain-driver-warm-up",
                             args=(ctx.reads, driver_output, ctx.warm_up_driver),
                             daemon=True).start()
        if ctx.in_driver:  # no Spark job: the tasks run here, their output written here
            frames = run_in_driver(fn, ctx)
            if ctx.collect is not None:
                ctx.collect(_arrow(frames))
            elif driver_output is not None:
                driver_output.write(frames)
            return
        result = run_tasks(df, fn, ctx)
        if ctx.collect is not None:  # exactly-once: written with the batch's commit
            ctx.collect(result.toArrow())
        elif output_topic:
            result.write.format("kafka").options(**sink).option("topic", output_topic).save()
        else:
            result.count()  # run it

    return process_batch


def run_tasks(df: DataFrame, fn: ProcessTask, ctx: BatchContext) -> DataFrame:
    """The rows ``fn`` returns (``key``, ``value`` as bytes), ``fn`` called for each virtual
    task of ``df`` (once, or once per piece with ``ctx.cut``) with that task's rows in
    (partition, offset) order, tasks in parallel.

    A batch whose tasks' rows already sit one task to a Spark partition, over as many
    partitions as it can use (``ctx.tasks_placed``: a Kafka batch read by a Spark task
    per core or per partition), is run where it was read: the read and the user's code
    in one stage, without the shuffle's second stage (its Python tasks cost ~50 ms each
    here, a third of a small batch)."""
    runner = _partition_runner(fn, ctx.processor_id, ctx.version, ctx.state_dir,
                               ctx.checkpoint_id, ctx.cut, ctx.executor_state, ctx.task_rows,
                               ctx.key_hash)
    if ctx.reads is not None and ctx.reads.groups:
        # the runners read the batch's ranges themselves (``worker.runtime.task_reads``):
        # one Spark task per group of ranges, as the source would have read them
        n = len(ctx.reads.groups)
        return ctx.spark.range(0, n, 1, n).mapInPandas(_reading(runner, ctx.reads),
                                                        OUTPUT_SCHEMA)
    placed = df if ctx.tasks_placed else place_tasks(df, ctx)
    return placed.mapInPandas(runner, OUTPUT_SCHEMA)


def run_in_driver(fn: ProcessTask, ctx: BatchContext) -> list[pd.DataFrame]:
    """What ``fn`` returns for a batch whose runners read its ranges (``ctx.reads``), run
    in this process (``worker.runtime.driver_batches``): each group of ranges by its own
    runner, one after the other, as its Spark task would have run it (the same reads,
    routes, cut plan, state and row counts)."""
    if ctx.reads is None or not ctx.reads.groups:
        raise ValueError("a batch runs in the driver only when its runners read it")
    keep_unfrozen()
    runner = _partition_runner(fn, ctx.processor_id, ctx.version, ctx.state_dir,
                               ctx.checkpoint_id, ctx.cut, ctx.executor_state, ctx.task_rows,
                               ctx.key_hash)
    reading = _reading(runner, ctx.reads)
    out: list[pd.DataFrame] = []
    for group in range(len(ctx.reads.groups)):
        out.extend(reading(iter([pd.DataFrame({"id": [group]})])))
    return out


def warm_up_driver(reads: TaskReads, output: DriverOutput | None,
                   ready: threading.Event) -> None:
    """Make this process's clients for running batches in the driver (a thread, while
    the batch ``reads`` belongs to runs in Spark): a consumer of each of its partitions,
    positioned where the batch ends (where the partition's next batch starts), and the
    output's producer, connected. Sets ``ready`` when done, made or not (a client that
    failed is made again by the batch that needs it)."""
    try:
        keep_unfrozen()
        consumers = pool()
        for group in reads.groups:
            for r in group.ranges:
                consumer = consumers.take(reads.kafka, r.topic, r.partition, r.end)
                consumers.give_back(reads.kafka, r.topic, r.partition, consumer, r.end)
        if output is not None:
            output.connect()
    except Exception as e:  # (only a head start: the batches make what is missing)
        log.warning("the driver's Kafka clients were not made ahead of its batches: %s", e)
    finally:
        ready.set()


def _arrow(frames: list[pd.DataFrame]) -> Any:
    """``frames`` as the Arrow table Spark's ``toArrow`` makes of the output schema."""
    import pyarrow as pa  # type: ignore[import-untyped]  # noqa: PLC0415

    schema = pa.schema([("key", pa.binary()), ("value", pa.binary())])
    if not frames:
        return schema.empty_table()
    return pa.Table.from_pandas(pd.concat(frames, ignore_index=True), schema=schema,
                                preserve_index=False)


def _reading(runner: Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]],
             reads: TaskReads) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """``runner`` fed the records of the groups its Spark task's input rows number."""

    def run(groups: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        def frames() -> Iterator[pd.DataFrame]:
            for numbers in groups:
                for i in numbers["id"].tolist():
                    yield from reads.frames(int(i))

        yield from runner(frames())

    return run


#: Spark partitions per core a batch's tasks are placed on. Every Spark task that runs
#: Python costs a fixed ~55 ms on a small host (measured at local[1]: a batch of 8 tasks
#: on 8 partitions took 0.91 s with no work at all, on 2 partitions 0.52 s), and a
#: batch's fixed cost is what bounds how short batches, and so handovers, can be; two
#: per core still lets a core that finished early take the next partition.
PARTITIONS_PER_CORE = 2


def placed_by_reads(readers: int, tasks_with_rows: int, cores: int,
                    partitions_per_task: int = 1) -> bool:
    """Whether a batch read by ``readers`` Spark tasks (each Kafka partition's records
    in one of them) runs its tasks where they were read: the shuffle onto task
    partitions could not run more of them at once, and no task has rows of two Kafka
    partitions (``partitions_per_task``: the most any has; GroupByPartition over two
    topics), which two readers may read: the task would run twice at once, two calls
    on one state store."""
    return (partitions_per_task <= 1 and readers > 0
            and readers >= min(tasks_with_rows, max(1, cores)))


def place_tasks(df: DataFrame, ctx: BatchContext) -> DataFrame:
    """``df`` repartitioned so that each virtual task's rows sit in one Spark partition:
    task ``i`` (of ``ctx.task_names``) in partition ``i`` modulo
    :data:`PARTITIONS_PER_CORE` partitions per core (tasks sharing a partition run one
    after the other, each with its rows in order).

    Placing by index rather than by a hash of the task name matters: hashing 8 names onto
    8 partitions leaves some empty and runs colliding tasks one after the other, so the
    cores idle while the batch waits for the busiest partition.
    """
    names = ctx.task_names or ("",)
    cores = max(1, ctx.spark.sparkContext.defaultParallelism)
    partitions = min(len(names), PARTITIONS_PER_CORE * cores)
    index = "CASE taskName " + " ".join(
        f"WHEN {sql_string(n)} THEN {i}" for i, n in enumerate(names)) + " ELSE 0 END"
    return (df.withColumn("_taskIndex", F.expr(index))
            .repartitionById(partitions, F.expr(f"pmod(_taskIndex, {partitions})"))
            .drop("_taskIndex"))


def _partition_runner(fn: ProcessTask, processor_id: str, version: int,
                      state_dir: str | None = None, checkpoint_id: str | None = None,
                      cut: CutPlan | None = None,
                      executor_state: ExecutorStatePlan | None = None,
                      rows_counted: Any = None,
                      key_hash: KeyHash | None = None,
                      ) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        settle()
        frames = [b for b in batches if len(b)]
        if not frames:
            return
        rows = pd.concat(frames, ignore_index=True)
        order = "offset" if "offset" in rows.columns else "sequenceNumber"
        tasks = [(str(name), unordered.sort_values(
            # Kinesis sequence numbers are decimal strings of any length: as numbers
            ["partition", order], kind="stable",
            key=lambda c: c.str.zfill(128) if c.name == "sequenceNumber" else c))
            for name, unordered in rows.groupby("taskName", sort=True)]
        if cut is not None:
            processed: dict[str, int] = {}
            yield from _pieces(fn, processor_id, version, state_dir, checkpoint_id, cut,
                               tasks, executor_state, key_hash, processed)
            if rows_counted is not None:
                # the rows each task ran: a batch cut short leaves the rest to the next
                # batch, which reads them again (counted here too, they would count
                # twice in their bucket: a false hot bucket under load)
                rows_counted.add(processed)
            return
        if rows_counted is not None:  # the key-bucket counts: no Spark job of their own
            rows_counted.add({name: len(these) for name, these in tasks})
        for name, task_rows in tasks:
            def call(store: Callable[[], TaskStore], name: str = name,
                     these: pd.DataFrame = task_rows) -> pd.DataFrame | None:
                return fn(TaskContext(processor_id, version, name, store),
                          these.reset_index(drop=True))

            with _state(name, state_dir, checkpoint_id, executor_state, key_hash) as store:
                out = call(store)
            if out is not None and len(out):
                yield _encoded(out)

    return run


def _pieces(fn: ProcessTask, processor_id: str, version: int, state_dir: str | None,
            checkpoint_id: str | None, cut: CutPlan,
            tasks: list[tuple[str, pd.DataFrame]],
            executor_state: ExecutorStatePlan | None = None,
            key_hash: KeyHash | None = None,
            processed: dict[str, int] | None = None) -> Iterator[pd.DataFrame]:
    """Each task's rows a piece at a time, until the batch is cut (``worker.cuts``): the
    task in work stops before its next piece, the tasks after it do not start, and each
    reports the first offset it left. One piece always runs, so a batch cut as it
    starts still moves on. ``processed``: the rows each task ran, added to."""
    cut.begin(name for name, _ in tasks)
    worked = False
    stopped = False
    for name, task_rows in tasks:
        if stopped:
            cut.report(name, _first_offsets(task_rows))
            continue
        with _state(name, state_dir, checkpoint_id, executor_state, key_hash) as store:
            ctx = TaskContext(processor_id, version, name, store)
            for start, end in piece_bounds(len(task_rows), cut.pieces):
                if worked and cut.is_cut():
                    stopped = True
                    cut.report(name, _first_offsets(task_rows.iloc[start:]))
                    break
                out = fn(ctx, task_rows.iloc[start:end].reset_index(drop=True))
                worked = True
                if processed is not None:
                    processed[name] = processed.get(name, 0) + end - start
                if out is not None and len(out):
                    yield _encoded(out)


def _state(task: str, state_dir: str | None, checkpoint_id: str | None,
           executor_state: ExecutorStatePlan | None, key_hash: KeyHash | None
           ) -> contextlib.AbstractContextManager[Callable[[], TaskStore]]:
    """``task``'s state for a batch: kept by this executor (a cluster master), or on the
    driver's disk, which ``local[N]`` executors share."""
    if executor_state is not None:
        return executor_task_state(executor_state, task, key_hash=key_hash)
    return task_state(state_dir, task, checkpoint_id, key_hash)


def _first_offsets(rows: pd.DataFrame) -> dict[tuple[str, int], int]:
    """Per (topic, partition), the offset of the first of ``rows`` (Kafka)."""
    firsts = rows.groupby(["topic", "partition"], sort=False)["offset"].min()
    return {(str(k[0]), int(k[1])): int(o) for k, o in firsts.items()}  # type: ignore[index]


def _encoded(out: pd.DataFrame) -> pd.DataFrame:
    """``process_task``'s rows as the output schema's bytes. Columns already all bytes
    (what a job writing bytes returns) pass as they are: checked in one C loop, where
    looking at each value in Python cost a record 1.6 us, half the runner's own time."""
    columns = {}
    for c in ("key", "value"):
        column = out[c]
        if pd.api.types.infer_dtype(column, skipna=True) not in ("bytes", "empty"):
            column = pd.Series([v.encode() if isinstance(v, str) else v for v in column],
                               dtype=object)
        columns[c] = column.reset_index(drop=True)
    return pd.DataFrame(columns, copy=False)
