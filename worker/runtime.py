"""One worker = one PySpark application acting as one Coxswain processor.

Life of a worker: register; heartbeat on the interval the coordinator gives (with stats);
for each job model version whose barrier is done, run one Structured Streaming query over
its tasks (``worker.plan``); on a newer version, keep running if the worker's own
assignment did not change (ack at once), else hand over: let the running batch finish
and its commit be acknowledged, stop the query, ack, wait for the barrier, start the next
query. Each query gets a fresh Spark checkpoint folder: where to start comes from the
coordinator's per-bucket checkpoints, never from Spark's own log.

Commits are asynchronous (``worker.commits``): uploaded while the next batch runs, the
newest always acknowledged before a hand-over. A fenced commit (409) stops the query.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

from grouping.task_names import parse_standby_task_name
from worker.busy import BusyMeter
from worker.client import CoordinatorClient, CoordinatorError, Fenced, LeaseLost
from worker.commits import AsyncCommitter
from worker.jars import connector_jars
from worker.kinesis_source import NAME as KINESIS
from worker.kinesis_source import KinesisDataSource
from worker.plan import QueryPlan, plan_query, sql_string
from worker.state.store import TaskStore
from worker.state.tasks import (
    StateConfig,
    TaskStates,
    new_checkpoint_id,
    no_state,
    run_with_state,
)

log = logging.getLogger("coxswain.worker")

WAITING_RECHECK_S = 1.0  # how often tasks waiting for parent shards ask again
MAX_LAG = 2**63 - 1  # what a lag may be (int64, as the coordinator takes them)
RESTORE_RETRY_MAX_S = 10.0  # the longest wait between two tries of a failed restore

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "keyBucket",
           "taskName")
# Kinesis input: key = partition key, value = data, topic = stream, partition = the
# shard's number (shard: its id); sequence numbers are decimal strings (beyond int64)
KINESIS_COLUMNS = ("key", "value", "topic", "partition", "shard", "sequenceNumber",
                   "approximateArrivalTimestamp", "keyBucket", "taskName")


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker runs."""

    coordinator: str
    kafka_bootstrap: str
    processor_id: str | None = None
    location: str = field(default_factory=socket.gethostname)
    token: str | None = None
    spark_master: str = "local[2]"
    max_offsets_per_trigger: int | None = None
    max_commit_delay_s: float = 60.0
    api: str = "batch"  # or "task": process_task(ctx, rows) per virtual task
    output_topic: str | None = None  # where process_task's returned rows go
    trigger_interval_s: float = 0.5
    checkpoint_root: Path | None = None
    state: StateConfig | None = None  # process_task keeps per-key state (ctx.state)
    kinesis_endpoint: str | None = None  # Kinesis inputs: the API endpoint (default AWS's)
    kinesis_region: str | None = None


@dataclass(frozen=True)
class BatchContext:
    """What ``process_batch`` gets besides the rows."""

    processor_id: str
    version: int
    batch_id: int
    spark: SparkSession
    task_names: tuple[str, ...] = ()  # this query's active tasks, in a fixed order
    state_dir: str | None = None  # a stateful worker's state dir
    checkpoint_id: str | None = None  # the id of this batch's state snapshots


ProcessBatch = Callable[[DataFrame, BatchContext], None]


@dataclass(frozen=True)
class TaskContext:
    """What ``process_task`` gets besides its rows; ``state`` is the task's per-key state
    (a worker started with ``--stateful``)."""

    processor_id: str
    version: int
    task_name: str
    open_state: Callable[[], TaskStore] = field(default=no_state, repr=False, compare=False)

    @property
    def state(self) -> TaskStore:
        """The task's state: ``get(key, name, default)``, ``set``, ``delete``,
        ``items(key)``, ``get_bytes``/``set_bytes``; every entry under its record key."""
        return self.open_state()


ProcessTask = Callable[[TaskContext, pd.DataFrame], "pd.DataFrame | None"]
OUTPUT_SCHEMA = "key binary, value binary"


def task_api(fn: ProcessTask, output_topic: str | None, kafka_bootstrap: str) -> ProcessBatch:
    """``process_batch`` running ``fn`` once per virtual task of each batch, in parallel
    across tasks and with each task's rows in offset order (SEP-32: parallelism beyond
    partitions, order within a key). Rows ``fn`` returns (columns ``key``, ``value``: bytes
    or str) go to ``output_topic``."""

    def process_batch(df: DataFrame, ctx: BatchContext) -> None:
        result = run_tasks(df, fn, ctx)
        if output_topic:
            (result.write.format("kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
             .option("topic", output_topic).save())
        else:
            result.count()  # run it

    return process_batch


def run_tasks(df: DataFrame, fn: ProcessTask, ctx: BatchContext) -> DataFrame:
    """The rows ``fn`` returns (``key``, ``value`` as bytes), ``fn`` called once per virtual
    task of ``df`` with that task's rows in (partition, offset) order, tasks in parallel."""
    return place_tasks(df, ctx).mapInPandas(
        _partition_runner(fn, ctx.processor_id, ctx.version, ctx.state_dir, ctx.checkpoint_id),
        OUTPUT_SCHEMA)


def place_tasks(df: DataFrame, ctx: BatchContext) -> DataFrame:
    """``df`` repartitioned so that each virtual task's rows sit in one Spark partition,
    task ``i`` (of ``ctx.task_names``) in partition ``i``; beyond 16 partitions per core
    tasks share partitions round-robin.

    Placing by index rather than by a hash of the task name matters: hashing 8 names onto
    8 partitions leaves some empty and runs colliding tasks one after the other, so the
    cores idle while the batch waits for the busiest partition.
    """
    names = ctx.task_names or ("",)
    cores = max(1, ctx.spark.sparkContext.defaultParallelism)
    partitions = min(len(names), 16 * cores)
    index = "CASE taskName " + " ".join(
        f"WHEN {sql_string(n)} THEN {i}" for i, n in enumerate(names)) + " ELSE 0 END"
    return (df.withColumn("_taskIndex", F.expr(index))
            .repartitionById(partitions, "_taskIndex").drop("_taskIndex"))


def _partition_runner(fn: ProcessTask, processor_id: str, version: int,
                      state_dir: str | None = None, checkpoint_id: str | None = None,
                      ) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        frames = [b for b in batches if len(b)]
        if not frames:
            return
        rows = pd.concat(frames, ignore_index=True)
        order = "offset" if "offset" in rows.columns else "sequenceNumber"
        for task_name, unordered in rows.groupby("taskName", sort=True):
            # Kinesis sequence numbers are decimal strings of any length: as numbers
            task_rows = unordered.sort_values(
                ["partition", order], kind="stable",
                key=lambda c: c.str.zfill(128) if c.name == "sequenceNumber" else c)
            name = str(task_name)

            def call(store: Callable[[], TaskStore], name: str = name,
                     these: pd.DataFrame = task_rows) -> pd.DataFrame | None:
                return fn(TaskContext(processor_id, version, name, store),
                          these.reset_index(drop=True))

            out = run_with_state(state_dir, name, checkpoint_id, call)
            if out is not None and len(out):
                yield pd.DataFrame({c: [v.encode() if isinstance(v, str) else v
                                        for v in out[c]] for c in ("key", "value")})

    return run


def warm_python_workers(spark: SparkSession) -> None:
    """Start one Python worker per core with pandas and pyarrow imported, before the first
    batch. Spark reuses them; without this the first batch's tasks each pay a Python
    start-up and imports, all at once, and begin up to a second apart on a small host."""
    started = time.monotonic()
    cores = max(1, spark.sparkContext.defaultParallelism)
    spark.range(cores, numPartitions=cores).mapInPandas(_pass_through, "id long").count()
    log.info("%d Python workers ready in %.1fs", cores, time.monotonic() - started)


def _pass_through(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    yield from batches


class Worker:
    """Runs one processor until :meth:`stop`."""

    def __init__(self, config: WorkerConfig, process_batch: ProcessBatch,
                 spark: SparkSession, client: CoordinatorClient | None = None) -> None:
        self.config = config
        self._process = process_batch
        self._spark = spark
        self._client = client or CoordinatorClient(config.coordinator, config.token)
        self._stop = threading.Event()
        self._lease_lost = threading.Event()
        self._batch_lock = threading.Lock()
        self._stopping_query = False
        self._fenced = threading.Event()
        self.processor_id = config.processor_id or ""
        self._stats: dict[str, Any] = {}
        self._root = config.checkpoint_root or Path(tempfile.mkdtemp(prefix="coxswain-"))
        self._states = TaskStates(config.state) if config.state is not None else None
        self._active: list[str] = []  # this processor's active tasks, for state lags
        self._model: dict[str, Any] | None = None  # the latest job model seen
        self._lags: dict[str, int] = {}  # state lag per task, for the heartbeats
        self._busy = BusyMeter()  # share of recent time in batches, for the autosizer
        self._waiting: tuple[str, ...] = ()  # tasks waiting for parent shards to finish
        self._beat_now = threading.Event()  # heartbeat now, not at the next interval
        self._client.reconnected = self._beat_now.set
        self._restart = False  # some of them may start: restart the query, same version
        self._version = 0  # the latest version acknowledged while keeping the query
        # the running query's plan and the query (once started), for its backlog
        self._running: tuple[QueryPlan, list[Any]] | None = None

    # -- lifecycle

    def stop(self) -> None:
        """Ask the worker to stop (it hands over its tasks and leaves)."""
        self._stop.set()

    def run(self) -> None:
        """Register and process until stopped. A lost lease (found by any request: a
        heartbeat, poll, ack or commit) or a fenced commit ends processing under that
        lease, never the worker: it registers again, with the same id, and carries on."""
        while not self._stop.is_set():
            reg = self._client.register(self.processor_id or self.config.processor_id,
                                        self.config.location)
            self.processor_id = reg.processor_id
            self._lease_lost.clear()
            self._fenced.clear()
            log.info("registered as %s at %s", self.processor_id, self.config.location)
            beat = threading.Thread(target=self._heartbeat,
                                    args=(reg.heartbeat_interval_ms / 1000,), daemon=True)
            beat.start()
            keeper = None
            if self._states is not None:
                keeper = threading.Thread(target=self._keep_state, daemon=True,
                                          args=(reg.heartbeat_interval_ms / 1000,))
                keeper.start()
            try:
                self._follow()
            except (LeaseLost, Fenced) as e:  # an ack's or poll's answer
                log.error("lease lost (%s): stopping processing and registering again", e)
            finally:
                self._lease_lost.set()  # ends the heartbeat thread
                self._beat_now.set()
                beat.join(10)
                if keeper is not None:
                    keeper.join(30)
        try:
            self._client.leave(self.processor_id)
        except Exception as e:
            log.warning("leaving failed: %s", e)
        self._client.close()

    def _heartbeat(self, interval_s: float) -> None:
        while True:
            # every interval, or at once after a reconnection (CoordinatorClient.reconnected)
            self._beat_now.wait(interval_s)
            self._beat_now.clear()
            if self._lease_lost.is_set():
                return
            try:
                # int64 offsets or milliseconds; never more (the coordinator would clamp)
                lags = ({t: min(max(0, lag), MAX_LAG) for t, lag in self._lags.items()}
                        if self._states else None)
                stats = dict(self._stats)
                if stats:  # after the first batch: how busy since (0 when idle)
                    stats["busy"] = round(self._busy.share(time.monotonic()), 3)
                    stats.update(self._backlog())  # now, not as of the last batch
                self._client.heartbeat(self.processor_id, task_lags=lags, stats=stats)
            except LeaseLost:
                log.error("lease lost: stopping processing and registering again")
                self._lease_lost.set()
                return
            except Fenced as e:  # registered again (elsewhere?) since: this lease is over
                log.error("lease fenced (%s): stopping processing and registering again", e)
                self._lease_lost.set()
                return
            except Exception as e:
                log.warning("heartbeat failed: %s", e)

    def _keep_state(self, interval_s: float) -> None:
        """Stateful workers: keep standby copies fresh and the lags current, beside the
        heartbeats (a download must never delay a heartbeat)."""
        states = self._states
        assert states is not None
        gc_every = states.config.gc_interval_s
        next_gc = time.monotonic() + gc_every
        while not self._lease_lost.wait(interval_s):
            if gc_every > 0 and time.monotonic() >= next_gc:
                next_gc = time.monotonic() + gc_every
                self._collect_garbage(states)
            model = self._model
            if model is None:
                continue
            tasks = self._my_tasks(model)
            standbys = sorted({parsed[0] for name, t in tasks.items()
                               if t.get("taskMode") == "Standby"
                               and (parsed := parse_standby_task_name(name)) is not None})
            try:
                self._lags = states.refresh(list(self._active), standbys,
                                            self._client.checkpoints)
            except Exception as e:  # the next round tries again
                log.warning("state refresh failed: %s", e)

    def _collect_garbage(self, states: TaskStates) -> None:
        """Collect the blob store if the coordinator names this processor the collector."""
        try:
            collector, tasks = self._client.state_markers()
            if collector == self.processor_id:
                states.collect_garbage(tasks)
        except Exception as e:  # the next interval tries again
            log.warning("blob store collection failed: %s", e)

    # -- following job models

    def _follow(self) -> None:
        model = None
        while model is None and not self._done():
            model = self._client.job_model(self.processor_id, since=None)
            if model is None:
                time.sleep(0.5)
        self._model = model
        running: tuple[QueryPlan, Any] | None = None
        mine: Any = None
        try:
            while model is not None and not self._done():
                tasks = self._my_tasks(model)
                if running is not None and tasks == mine and not self._restart:
                    self._ack(model)  # keep running
                    self._version = model["version"]
                else:
                    self._restart = False
                    if running is not None:
                        self._hand_over(running)
                        running = None
                    self._ack(model)
                    model = self._await_barrier(model)
                    if model is None:
                        break
                    tasks = self._my_tasks(model)
                    running = self._start(model)
                mine = tasks
                model = self._next_model(model["version"], running)
                if model is not None:
                    self._model = model
        finally:
            if running is not None:
                self._hand_over(running)

    def _done(self) -> bool:
        return self._stop.is_set() or self._lease_lost.is_set() or self._fenced.is_set()

    def _ack(self, model: dict[str, Any]) -> None:
        """Acknowledge a version this processor is part of (a version generated before it
        joined has nothing to acknowledge)."""
        if self.processor_id not in model["containers"]:
            return
        try:
            self._client.ack(self.processor_id, model["version"])
        except CoordinatorError as e:
            if e.code != "not_a_participant":
                raise

    def _my_tasks(self, model: dict[str, Any]) -> Any:
        return model["containers"].get(self.processor_id, {}).get("tasks", {})

    def _next_model(self, version: int, running: tuple[QueryPlan, Any] | None = None
                    ) -> dict[str, Any] | None:
        checked = time.monotonic()
        while not self._done():
            if running is not None and not running[1][0].isActive:
                # the user's code or Spark failed: fail loudly rather than idle with a lease
                raise RuntimeError(f"the query of version {running[0].version} died: "
                                   f"{running[1][0].exception()}")
            if self._waiting and time.monotonic() - checked >= WAITING_RECHECK_S:
                checked = time.monotonic()
                if self._startable(self._waiting):  # restart with them, same version
                    self._restart = True
                    return self._model
            model = self._client.job_model(self.processor_id, since=version, wait_ms=1000)
            if model is not None:
                return model
        return None

    def _startable(self, waiting: tuple[str, ...]) -> bool:
        """True when a task that waited for a parent shard's key space may start now."""
        try:
            found = self._client.checkpoints(list(waiting))
        except CoordinatorError as e:  # a newer version is coming: it will replan
            log.info("checkpoints of waiting tasks not readable (%s)", e)
            return False
        ready = [n for n in waiting if not found.get(n, {}).get("waitingFor")]
        if ready:
            log.info("parent shards finished: starting %s", ", ".join(ready))
        return bool(ready)

    def _await_barrier(self, model: dict[str, Any]) -> dict[str, Any] | None:
        """Wait until ``model``'s barrier is done; a newer version may come instead."""
        while not self._done():
            if model["barrier"] == "done":
                return model
            # a timed-out barrier is followed by a newer version: wait for that one
            pending = "pending" if model["barrier"] == "pending" else None
            newer = self._client.job_model(self.processor_id, since=model["version"],
                                           wait_ms=1000, barrier=pending)
            if newer is None:
                continue
            if newer["version"] != model["version"]:
                self._ack(newer)
            model = newer
        return None

    # -- queries

    def _start(self, model: dict[str, Any]) -> tuple[QueryPlan, Any] | None:
        names = sorted(n for n, t in self._my_tasks(model).items()
                       if t.get("taskMode", "Active") == "Active")
        if not names:
            log.info("version %d: no active tasks here", model["version"])
            return None
        try:
            checkpoints = self._client.checkpoints(names)
        except CoordinatorError as e:  # a newer version replaced this one meanwhile
            log.info("version %d: checkpoints not readable (%s); waiting for the next",
                     model["version"], e)
            return None
        plan = plan_query(model, self.processor_id, checkpoints)
        self._waiting = plan.waiting
        if plan.waiting:
            log.info("version %d: %d tasks wait for parent shards: %s", plan.version,
                     len(plan.waiting), ", ".join(plan.waiting[:10]))
        if not plan.starts:
            log.info("version %d: no active tasks here", plan.version)
            return None
        states = self._states
        starting = sorted({s.task for s in plan.starts})
        if states is not None and not self._restore(  # each from its committed snapshot
                states, model["version"], {n: checkpoints.get(n, {}) for n in starting},
                set(names)):
            return None  # a newer version came meanwhile, or the worker is stopping
        self._active = names

        def upload(version: int, cps: dict[str, Any], checkpoint_id: str | None) -> int:
            # a failure here (the blob store or the coordinator down) fails this commit
            # only: the committer tries again, and the newest then covers everything
            if states is not None and checkpoint_id is not None:
                cps = states.back_up(checkpoint_id, cps)
            advanced = self._client.commit(self.processor_id, version, cps)
            if states is not None:
                states.committed(cps)
            return advanced

        committer = AsyncCommitter(upload, self.config.max_commit_delay_s)
        source = self._source(plan).withColumn("keyBucket", F.expr(plan.bucket_expr()))
        columns = KINESIS_COLUMNS if plan.system == "kinesis" else COLUMNS
        # a batch's end per partition: the next offset to read after its last row (for
        # Kinesis an end-of-shard marker's, endingSequenceNumber + 1, when the shard ended)
        end_of = (F.max("offsetKey") if plan.system == "kinesis"
                  else F.max("offset") + 1).alias("end")
        task_of = _task_column(plan)
        task_names = tuple(sorted({s.task for s in plan.starts}))
        self._stopping_query = False
        self._committed: dict[tuple[str, int], int] = {}
        holder: list[Any] = []  # the query, once started

        def on_batch(batch: DataFrame, batch_id: int) -> None:
            with self._batch_lock:
                if self._stopping_query or self._fenced.is_set():
                    return  # handing over: this batch is left to the next owner
                started = time.monotonic()
                batch.persist()
                try:
                    per_partition = batch.groupBy("topic", "partition").agg(
                        end_of, F.count("*").alias("n")).collect()
                    ends = {(r["topic"], r["partition"]):
                            int(r["end"]) + (1 if plan.system == "kinesis" else 0)
                            for r in per_partition}
                    read = sum(int(r["n"]) for r in per_partition)
                    if ends:
                        mine = batch.where(plan.filter_sql()).withColumn(
                            "taskName", F.expr(task_of)).select(*columns)
                        checkpoint_id = new_checkpoint_id() if states is not None else None
                        self._process(mine, BatchContext(
                            self.processor_id, plan.version, batch_id, self._spark,
                            task_names, str(states.state_dir) if states else None,
                            checkpoint_id))
                        try:
                            committer.submit(plan.version, plan.commit(ends), checkpoint_id)
                        except Fenced as e:
                            log.error("fenced: %s; stopping this query", e)
                            self._fenced.set()
                        except LeaseLost as e:
                            log.error("lease lost (%s): stopping this query", e)
                            self._lease_lost.set()
                finally:
                    batch.unpersist()
                took = time.monotonic() - started
                self._busy.record(started, started + took)
                self._committed.update(ends)
                self._stats = {
                    # the version this worker runs under (kept across versions that did
                    # not change its tasks)
                    "batchSeconds": round(took, 3),
                    "version": max(plan.version, self._version),
                    "recordsPerSecond": round(read / took, 1) if took > 0 else 0.0,
                    "commitsSkipped": committer.skipped,
                    "commitFailures": committer.failures,
                    "commitPendingSeconds": _age(committer.unacknowledged_since()),
                    "triggerSeconds": self.config.trigger_interval_s}
                if states is not None:
                    self._stats["stateRestores"] = {
                        t: states.restores[t] for t in names if t in states.restores}
                    self._stats["stateBytes"] = states.sizes(names)

        folder = self._root / f"v{plan.version}-{uuid.uuid4().hex[:8]}"
        query = (source.writeStream.foreachBatch(on_batch)
                 .option("checkpointLocation", str(folder))
                 .trigger(processingTime=f"{int(self.config.trigger_interval_s * 1000)} "
                                          "milliseconds")
                 .start())
        holder.append(query)
        self._running = (plan, holder)
        log.info("version %d: query over %s from %s", plan.version, plan.assign(),
                 plan.starting_offsets())
        return plan, (query, committer)

    def _restore(self, states: TaskStates, version: int,
                 checkpoints: dict[str, Any], keep: set[str]) -> bool:
        """Restore the state of the tasks about to start; a failure (the blob store
        unreachable) is tried again with backoff, never fatal, while watching for a
        newer job model (False: one came, this start is off) and a stop."""
        delay = 0.5
        while not self._done():
            try:
                states.restore(checkpoints, keep)
                return True
            except Exception as e:  # a dependency down: try again
                log.warning("version %d: restoring state failed (%s: %s); trying again "
                            "in %.1fs", version, type(e).__name__, str(e)[:300], delay)
            if self._client.job_model(self.processor_id, since=version,
                                      wait_ms=int(delay * 1000)) is not None:
                log.info("version %d: a newer version came while restoring", version)
                return False
            delay = min(RESTORE_RETRY_MAX_S, delay * 2)
        return False

    def _backlog(self) -> dict[str, dict[str, int]]:
        """The running query's consumer lag per task as its last progress says (Spark
        reports one per trigger, and at least every 10 s when no data comes):
        ``consumerLag``, and for Kinesis ``consumerLagMs`` (behind the shards' tips)."""
        running = self._running
        if running is None:
            return {}
        plan, holder = running
        try:
            out = {"consumerLag": _consumer_lag(plan, self._committed, holder)}
            if plan.system == "kinesis":
                out["consumerLagMs"] = _consumer_lag(plan, self._committed, holder, "ms")
        except Exception as e:  # a query stopping meanwhile: the next heartbeat tells
            log.debug("consumer lag not read: %s", e)
            return {}
        return out

    def _source(self, plan: QueryPlan) -> DataFrame:
        """The streaming DataFrame of ``plan``'s partitions, from their starts."""
        if plan.system == "kinesis":
            shards = plan.kinesis_shards()
            if len(shards) != 1:
                raise ValueError(f"a worker's query reads one Kinesis stream, not "
                                 f"{sorted(shards)}")
            (stream, per_shard), = shards.items()
            self._spark.dataSource.register(KinesisDataSource)
            return (self._spark.readStream.format(KINESIS)
                    .option("stream", stream)
                    .option("endpoint", self.config.kinesis_endpoint or "")
                    .option("region", self.config.kinesis_region or "")
                    .option("shards", json.dumps(per_shard))
                    .option("maxRecordsPerShard",
                            str(self.config.max_offsets_per_trigger or 10_000))
                    .load())
        reader = (self._spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", self.config.kafka_bootstrap)
                  .option("assign", json.dumps(plan.assign()))
                  .option("startingOffsets", json.dumps(plan.starting_offsets()))
                  .option("failOnDataLoss", "false"))
        if self.config.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", self.config.max_offsets_per_trigger)
        return reader.load()

    def _hand_over(self, running: tuple[QueryPlan, Any]) -> None:
        """Let the running batch finish, wait for its commit, stop the query."""
        plan, (query, committer) = running
        self._stopping_query = True
        self._running = None
        with self._batch_lock:  # the batch in flight (if any) ends first
            pass
        try:
            if not committer.flush(self.config.max_commit_delay_s):
                # (its blob store or the coordinator down): the next owner starts from
                # the last commit that went through, state and offsets alike
                log.error("version %d: last commit not done within %.0fs (%s); handing "
                          "over without it", plan.version, self.config.max_commit_delay_s,
                          committer.last_failure)
        except Fenced as e:
            log.error("last commit of version %d fenced: %s", plan.version, e)
        except LeaseLost as e:
            log.error("last commit of version %d: lease lost (%s)", plan.version, e)
        query.stop()
        committer.close()
        log.info("version %d: stopped after its last commit", plan.version)


def _age(since: float | None) -> float:
    """Seconds since ``since`` (monotonic), 0 for none."""
    return 0.0 if since is None else round(time.monotonic() - since, 3)


def _consumer_lag(plan: QueryPlan, committed: dict[tuple[str, int], int],
                  holder: list[Any], unit: str = "records") -> dict[str, int]:
    """Per task, for the autosizer: the partition's latest offset (as the query last saw
    it) minus the next offset committed for it. Kinesis knows no latest offset: its
    source reports each shard's backlog instead (``KinesisStreamReader.
    reportLatestOffset``): ``unit`` "records" (estimated) or "ms" (behind the tip)."""
    progress = holder[0].lastProgress if holder else None
    if not progress or not progress.get("sources"):
        return {}
    latest = progress["sources"][0].get("latestOffset") or {}
    if isinstance(latest, str):
        latest = json.loads(latest)
    if plan.system == "kinesis":
        key = "recordsBehind" if unit == "records" else "millisBehindLatest"
        behind: dict[str, int] = {}
        for s in plan.starts:
            found = (latest.get(str(s.partition)) or {}).get(key)
            if found is None:
                continue
            # a key bucket's records are its share of the shard's (keys spread evenly),
            # summed over a task's shards; milliseconds: the shard furthest behind
            if unit == "records":
                share = int(found) // plan.factor if s.key_bucket >= 0 else int(found)
                behind[s.task] = behind.get(s.task, 0) + share
            else:
                behind[s.task] = max(behind.get(s.task, 0), int(found))
        return behind
    lag: dict[str, int] = {}
    for s in plan.starts:
        end = latest.get(s.topic, {}).get(str(s.partition))
        done = committed.get((s.topic, s.partition))
        if end is not None and done is not None:
            lag[s.task] = max(lag.get(s.task, 0), int(end) - done)
    return lag


def _task_column(plan: QueryPlan) -> str:
    """Spark SQL naming the task of each kept record."""
    cases = []
    for s in plan.starts:
        cond = f"topic = {sql_string(s.topic)} AND partition = {s.partition}"
        if s.key_bucket >= 0:
            cond += f" AND keyBucket = {s.key_bucket}"
        cases.append(f"WHEN {cond} THEN {sql_string(s.task)}")
    return "CASE " + " ".join(cases) + " END"


def stop_spark(spark: SparkSession, timeout_s: float = 30.0) -> None:
    """Stop ``spark`` and wait for its JVM to exit, so nothing outlives the worker.

    PySpark's JVM exits on its own once the Python process is gone (it watches its stdin),
    but only later; closing that stdin and waiting makes the exit synchronous.
    """
    gateway = spark.sparkContext._gateway
    jvm = getattr(gateway, "proc", None)
    spark.stop()
    if jvm is None:
        return
    if jvm.stdin is not None:
        jvm.stdin.close()
    try:
        jvm.wait(timeout_s)
    except subprocess.TimeoutExpired:
        log.warning("Spark's JVM (pid %d) did not exit in %.0fs; killing it", jvm.pid,
                    timeout_s)
        jvm.kill()
        jvm.wait(10)


def spark_session(master: str, app_name: str = "coxswain-worker") -> SparkSession:
    """A Spark session with the Kafka connector's jars from the local cache, whose Python
    workers run this interpreter (with its packages: pandas for ``process_task``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master).appName(app_name)
             .config("spark.jars", ",".join(str(p) for p in connector_jars()))
             .config("spark.ui.enabled", "false")
             # small micro-batches: one shuffle partition per core, not coalesced
             .config("spark.sql.adaptive.coalescePartitions.enabled", "false")
             .getOrCreate())
    spark.conf.set("spark.sql.shuffle.partitions",
                   str(max(1, spark.sparkContext.defaultParallelism)))
    return spark
