"""Running the micro-batches of a worker's one query: each batch is processed for the
tasks running when it runs (``worker.running``), and committed asynchronously.

The running tasks change only between batches (``worker.runtime.boundary``):
:meth:`BatchRunner.remove`, :meth:`BatchRunner.add` and :meth:`BatchRunner.retag` are
applied by the batch in flight as it ends (or at once between batches), and the source
plan is published before the query plans its next batch. A batch planned before a change
runs after it with the tasks running then: a removed task's rows are left for its next
owner (neither processed nor committed here), an added task counts only batches of its
partition's generation.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

from common.kafka_clients import KafkaClientSettings
from worker.batch_size import BatchSize
from worker.busy import BusyMeter
from worker.client import CoordinatorClient, Fenced, LeaseLost
from worker.cluster.placement import SLOT, Placement, slot_sql
from worker.commits import AsyncCommitter
from worker.cut_signals import CutSignals, Left
from worker.cuts import processed_records
from worker.output.commit import TransactionalCommit
from worker.output.transactions import TransactionalOutput
from worker.plan import EARLIEST, LATEST, QueryPlan
from worker.running import (
    Running,
    add,
    advanced,
    for_batch,
    needed_from,
    nothing,
    only,
    read_after,
    read_again,
    read_past,
    remove,
    retag,
    rewound,
)
from worker.runtime.backlog import latest_offsets, task_backlog
from worker.runtime.batch_cuts import BatchCuts
from worker.runtime.boundary import BatchBoundary
from worker.runtime.bucket_counts import BucketCounts, TaskRows, count_buckets, owned_counts
from worker.runtime.contexts import COLUMNS, KINESIS_COLUMNS, BatchContext, ProcessBatch
from worker.runtime.driver_batches import DriverBatches
from worker.runtime.progress import ProgressLog
from worker.runtime.steering import BatchSteering
from worker.runtime.task_api import placed_by_reads
from worker.runtime.task_reads import Routes, TaskReads, split_reads
from worker.sources.jvm_kafka import Planned, planned_ranges
from worker.sources.kafka import ranges_of, readers_of, reads_of
from worker.sources.source_plan import split_key
from worker.state.remote import ExecutorStates, StateKeeping
from worker.state.tasks import new_checkpoint_id

log = logging.getLogger("coxswain.worker")
# each batch's ranges, the key spaces it ran from where, its cuts and its commit: what
# a lost or doubled record is traced back to (``--log-level INFO,coxswain.worker.batches=
# DEBUG``; the chaos runs keep it)
trace = logging.getLogger("coxswain.worker.batches")


#: (topic, partition) -> a number per partition of a batch (its end, or the source
#: generation it read at)
Ends = dict[tuple[str, int], int]


class BatchRunner:
    """The running tasks, what each has done, the commits, and the batch callback."""

    def __init__(self, spark: SparkSession, process: ProcessBatch, client: CoordinatorClient,
                 states: StateKeeping | None, lease_over: threading.Event,
                 max_commit_delay_s: float,
                 trigger_interval_s: float, processor_id: Callable[[], str],
                 publish: Callable[[Running], None], size: BatchSize | None = None,
                 batch_offsets: Callable[[int], dict[str, Any] | None] = lambda _: None,
                 set_limit: Callable[[int | None], None] = lambda _: None,
                 cut_signals: CutSignals | None = None,
                 read_ranges: Callable[[Planned], DataFrame] | None = None,
                 placement: Placement | None = None,
                 bucket_counts: BucketCounts | None = None,
                 task_reads: KafkaClientSettings | None = None,
                 driver_batches: DriverBatches | None = None) -> None:
        self._spark = spark
        self._buckets = bucket_counts  # how partitions spread over buckets, counted
        self._rows_counted: Any = None  # the accumulator of rows per task (made at first)
        self._process = process
        self._client = client
        self._states = states
        self._over = lease_over  # set when a commit is fenced or finds the lease lost
        self._max_delay_s = max_commit_delay_s
        self._trigger_s = trigger_interval_s
        self._pid = processor_id
        self.running: Running = nothing()
        # the source reads what the running tasks are after each change
        self.boundary = BatchBoundary(lambda: publish(self.running))
        self._done: dict[tuple[str, str, int], int] = {}  # (task, topic, p) -> next offset
        # (topic, p) -> (end of its last batch, the generation that batch read at)
        self.read: dict[tuple[str, int], tuple[int, int]] = {}
        self.committed: dict[tuple[str, int], int] = {}  # (topic, p) -> last commit's end
        self.transactions: TransactionalOutput | None = None  # exactly-once output
        self.committer = self._new_committer()
        self.busy = BusyMeter()
        self._behind: int | None = None  # records behind at the last heartbeat's look
        self._progress = ProgressLog(lag=lambda: self._behind)
        self.stats: dict[str, Any] = {}
        self.batches = 0
        # Kafka: the batch size steered toward a target duration, handed to the source
        # (``worker.runtime.steering``); a batch's ranges from the query's offset log
        self._steering = BatchSteering(size, set_limit, trigger_interval_s)
        self._batch_offsets = batch_offsets
        # a change of the running tasks, or running long, cuts the Kafka batch in flight
        # short (``worker.runtime.batch_cuts``)
        self._cuts = BatchCuts(spark, cut_signals)
        self._planned_under: int | None = None  # the batch in flight's source plan version
        self._ranges_read: dict[str, Any] = {}  # the batch in flight's ranges (tracing)
        # ``--kafka-reader jvm``: a batch's planned ranges read by Spark's Kafka connector
        # instead of the source's own rows (``worker.sources.jvm_kafka``)
        self._read_ranges = read_ranges
        # a cluster master with state: each task pinned to an executor
        # (``worker.cluster.placement``)
        self._placement = placement
        # ``process_task`` on the Python source: a batch whose tasks run where they are
        # read has its runners read its ranges (``worker.runtime.task_reads``)
        self._task_reads = task_reads
        self._cores: int | None = None  # the Spark session's default parallelism
        self._time_zone: str | None = None  # the session's (read once)
        self._planned_readers = 1  # the batch in flight's Spark tasks reading it
        # small batches whose runners read them run in the driver, without a Spark job
        # (``worker.runtime.driver_batches``; None: never)
        self._driver = driver_batches
        self._ran_in_driver = False  # the batch in flight
        # set once the driver's clients are made (its consumers, its producer): until
        # then its candidate batches run in Spark, the first of them making them
        self._driver_ready = threading.Event()
        self._driver_warming = False
        self.in_driver = 0  # batches run in the driver so far

    # -- the running tasks (each change applied at the batch boundary)

    def remove(self, tasks: Iterable[str]) -> Running:
        """Stop running ``tasks``: no batch after the one in flight processes or commits
        them (that one's commit is submitted when this returns)."""
        gone = set(tasks)

        def change() -> Running:
            self.running = remove(self.running, gone)
            self._done = {k: v for k, v in self._done.items() if k[0] not in gone}
            return self.running

        found: Running = self.boundary.change(change, queued=self._cuts.cut)
        return found

    def add(self, new: QueryPlan) -> Running:
        """Run the tasks of ``new`` from their resolved starts (every task commits under
        ``new.version`` from then on)."""

        def change() -> Running:
            self.running = add(self.running, new, self.read, self._done)
            if _resumes(new):  # their first output soon: a short first batch
                self._steering.resumed()
            return self.running

        found: Running = self.boundary.change(change, queued=self._cuts.cut)
        return found

    def retag(self, version: int) -> None:
        """Commit under ``version`` from the next batch boundary on (a newer model that
        kept the tasks). Not waited for: the control thread must not sit out a batch for
        it (tasks restored meanwhile would wait to run), and a commit tagged with the
        older version is accepted as long as its tasks were this processor's in every
        version since."""

        def change() -> None:
            if self.running.plan.version < version:  # an add may have tagged it since
                self.running = retag(self.running, version)

        self.boundary.offer(change)

    def flush(self, timeout_s: float) -> bool:
        """Wait until the newest commit is acknowledged: False when it was not within
        ``timeout_s`` (or the coordinator refused it: this lease is over)."""
        try:
            return self.committer.flush(timeout_s)
        except (Fenced, LeaseLost) as e:
            self._refused(e)
        return False

    def _refused(self, e: Fenced | LeaseLost) -> None:
        """The coordinator refused a commit: processing under this lease is over."""
        if isinstance(e, Fenced):
            log.error("a commit was fenced: %s; processing stops until registered again", e)
            self._over.set()
        else:
            log.error("a commit found the lease lost (%s): processing stops until "
                      "registered again", e)
            self._over.set()

    def renew(self, transactions: TransactionalOutput | None = None) -> None:
        """A new committer (after a lease ended: the old one refuses everything), writing
        each commit's output and checkpoint record with ``transactions`` (exactly-once
        output) when given."""
        self.committer.close(0.1)
        if self.transactions is not None:
            self.transactions.close()
        self.transactions = transactions
        self.committer = self._new_committer()

    def _new_committer(self) -> AsyncCommitter:
        states = self._states
        transactional = None if self.transactions is None else TransactionalCommit(
            self.transactions, self._client, self._pid, self._over)

        def upload(version: int, cps: dict[str, Any], checkpoint_id: str | None,
                   output: tuple[Any, ...]) -> int:
            # a failure here (the blob store or the coordinator down) fails this commit
            # only: the committer tries again, and the newest then covers everything
            began = time.monotonic()
            if states is not None and checkpoint_id is not None:
                cps = states.back_up(checkpoint_id, cps)
            backed_up = time.monotonic()
            if transactional is None:
                advanced_ = self._client.commit(self._pid(), version, cps)
            else:
                advanced_ = transactional(version, cps, output)
            if states is not None:
                states.committed(cps)
            trace.debug("commit of version %d: backup %.3fs, the rest %.3fs", version,
                        backed_up - began, time.monotonic() - backed_up)
            return advanced_

        return AsyncCommitter(upload, self._max_delay_s)

    # -- the batch callback

    def on_batch(self, batch: DataFrame, batch_id: int) -> None:
        """``foreachBatch``: process the batch for the tasks running now, then commit."""
        with self.boundary.batch():
            if self._over.is_set():
                trace.debug("batch %d: lease over, not run", batch_id)
                return  # this lease is over: the next owner takes these records
            started = time.monotonic()
            self._ran_in_driver = False
            steering = self._steering
            under = steering.issued  # the limit this batch was planned under
            plan = self.running.plan
            ranges = None if plan.system == "kinesis" else self._ranges(batch_id)
            if ranges is not None and self._read_ranges is not None:
                planned = planned_ranges({"p": self._ranges_read})
                if planned:  # one Spark task per Kafka partition reads it
                    batch = self._read_ranges(planned)
                    ranges = (*ranges[:3], len(planned))
            persisted = ranges is None
            if persisted:  # the batch read twice: once for its ends, once processed
                batch.persist()
            try:
                ends, gens, per_partition, readers = ranges if ranges is not None else (
                    *_measured(batch, plan.system == "kinesis"), 0)
                read = sum(per_partition.values())
                self.read = read_after(self.read, ends, gens)
                now = self._guarded(batch_id, plan, for_batch(plan, gens, self._done))
                waiting = {(s.topic, s.partition) for s in plan.starts} - {
                    (s.topic, s.partition) for s in now.starts}
                if waiting & set(gens):  # read before the generation its tasks count from
                    log.info("batch %d: rows of %s at an older generation than their "
                             "tasks' (%s): left to the partition's next reading", batch_id,
                             sorted(waiting & set(gens)), {k: gens[k] for k in waiting & set(gens)})
                log.debug("batch %d: %d rows, ends %s, generations %s, %d key spaces run",
                          batch_id, read, ends, gens, len(now.starts))
                if not now.starts:
                    trace.debug("batch %d v%d read %s | no key space at its generation",
                                batch_id, plan.version, _traced_ranges(self._ranges_read, ends))
                counting = bool(self._buckets is not None and now.starts
                                and self._buckets.due(now.factor))
                if counting and self._buckets is not None and not self._buckets.in_tasks:
                    try:  # an observation: its failure must never fail the batch
                        counted = count_buckets(batch, now)
                        self._buckets.add(now, counted, {k: sum(v.values())
                                                         for k, v in counted.items()})
                    except Exception as e:
                        log.warning("batch %d: key buckets not counted: %s", batch_id, e)
                in_tasks = counting and self._buckets is not None and self._buckets.in_tasks
                cut_short, timed = self._run(batch, batch_id, now, ends, readers,
                                             per_partition if in_tasks else None) \
                    if now.starts else (False, None)
            finally:
                if persisted:
                    batch.unpersist()
            ended = time.monotonic()
            took = ended - started
            if plan.system != "kinesis" and timed is not None:  # it ran long
                steering.after_cut_long(batch_id, timed, started, ended)
            elif plan.system != "kinesis":  # (a Kinesis batch has its per-shard limit)
                # a batch cut short for a change says nothing of a full one's duration,
                # nor does one the driver ran of a Spark batch's
                steering.after(0 if cut_short or self._ran_in_driver else read, started,
                               ended, under)
            self.busy.record(started, ended)
            # what the batches did (a user's sign of progress): a line per interval
            self._progress.batch(
                batch_id, read, len({s.task for s in now.starts}) if read else 0,
                len({s.task for s in plan.starts}), took,
                steering.issued if steering.size is not None and plan.system != "kinesis"
                else None, cut_short, self._ran_in_driver)
            self.batches += 1
            self.stats = {
                "batchSeconds": round(took, 3), "version": plan.version,
                "recordsPerSecond": round(read / took, 1) if took > 0 else 0.0,
                "commitsSkipped": self.committer.skipped,
                "commitFailures": self.committer.failures,
                "commitPendingSeconds": _age(self.committer.unacknowledged_since()),
                "triggerSeconds": self._trigger_s, "batchesInDriver": self.in_driver}
            spread = self._buckets.report() if self._buckets is not None else None
            if spread is not None:
                self.stats["keyBucketCounts"] = spread
            if steering.size is not None and plan.system != "kinesis":
                self.stats["batchLimit"] = steering.size.limit
                self.stats["batchesCut"] = self._cuts.count

    def _guarded(self, batch_id: int, plan: QueryPlan, now: QueryPlan) -> QueryPlan:
        """``now`` (the batch's run of ``plan``) without the tasks the batch read past the
        start of (Kafka: where each partition's range begins is known), their partitions
        read again from there from the next batch on, loudly: the reading slipped, and
        running them would skip records and commit past them
        (``worker.running.read_past``)."""
        froms = {split_key(k): int(r["from"]) for k, r in self._ranges_read.items()}
        # every partition's range, an empty one's too: a reading that slipped to a
        # partition's end shows at once, not only once a new record comes (that would
        # leave the records in between unprocessed while the partition is idle)
        generations = {split_key(k): int(r.get("g") or 0)
                       for k, r in self._ranges_read.items()}
        past = read_past(for_batch(plan, generations, self._done), froms)
        if not past:
            return now
        log.error("batch %d: read %s from past where %s start (%s): not run in it; "
                  "those partitions are read again from there", batch_id,
                  sorted({f"{s.topic}/{s.partition}@{froms[(s.topic, s.partition)]}"
                          for s in past}), sorted({s.task for s in past}),
                  ", ".join(f"{s.task} {s.partition}:{s.start}" for s in past))
        # from where every task of those partitions still needs them: a task added
        # meanwhile may need them from further back
        self.running = read_again(self.running, needed_from(
            self.running, self._done, {(s.topic, s.partition) for s in past}))
        self.boundary.queue(lambda: None)  # published as this batch ends
        return only(now, {s.task for s in now.starts} - {s.task for s in past})

    def _ranges(self, batch_id: int) -> tuple[Ends, Ends, Ends, int] | None:
        """A Kafka batch's ends, generations, records per partition and the Spark tasks
        reading it, from the source's offsets (``worker.sources.kafka``): no Spark job for
        them (None: unreadable)."""
        found = self._batch_offsets(batch_id)
        self._planned_under = None
        self._ranges_read = {}
        if found is None or not isinstance(found.get("p"), dict):
            return None
        self._ranges_read = found["p"]
        self._planned_readers = max(1, int(found.get("r") or 1))
        # the source plan's version the batch was planned under (a change since: cut it)
        self._planned_under = int(found.get("v") or 0)
        ends: Ends = {}
        gens: Ends = {}
        records: Ends = {}
        for key, r in found["p"].items():
            start, end = int(r["from"]), int(r["to"])
            if end > start:
                ends[split_key(key)] = end
                gens[split_key(key)] = int(r["g"])
                records[split_key(key)] = end - start
        return ends, gens, records, readers_of(found)

    def _spans_read(self) -> dict[tuple[str, int], tuple[int, int]] | None:
        """The batch's offsets read per Kafka partition, ``[from, to)`` (None: not known,
        as for Kinesis)."""
        if not self._ranges_read:
            return None
        return {split_key(k): (int(r["from"]), int(r["to"]))
                for k, r in self._ranges_read.items()}

    def query_restarted(self) -> None:
        """A new query runs the batches from now on (``BatchSteering.query_restarted``)."""
        self._steering.query_restarted()

    def _run(self, batch: DataFrame, batch_id: int, plan: QueryPlan,
             ends: dict[tuple[str, int], int], readers: int,
             count_buckets_of: Ends | None = None) -> tuple[bool, int | None]:
        """Process and commit the batch for ``plan``; whether it was cut short and, when
        only for running long, about how many records it processed. With
        ``count_buckets_of`` (the batch's records per partition) its tasks count their
        rows as they run them, for the key-bucket counts."""
        states = self._states
        columns = KINESIS_COLUMNS if plan.system == "kinesis" else COLUMNS
        # on a cluster master each task's state is kept by the executor that runs it,
        # and each task runs on one executor while it lives: its slot's (Kafka; the
        # batch's planned ranges read there)
        remote = states if isinstance(states, ExecutorStates) else None
        slots: dict[str, int] | None = None
        if remote is not None and self._placement is not None and self._ranges_read:
            partitions: dict[str, set[tuple[str, int]]] = {}
            for s in plan.starts:
                partitions.setdefault(s.task, set()).add((s.topic, s.partition))
            batch, slots = self._placement.rows(self._ranges_read, partitions)
        checkpoint_id = new_checkpoint_id() if states is not None else None
        tasks = tuple(sorted({s.task for s in plan.starts}))
        # a Kafka partition's rows are read by one Spark task: when the reading tasks
        # are as many as the tasks with rows could use, they run where they were read
        with_rows = Counter(s.task for s in plan.starts if (s.topic, s.partition) in ends)
        if self._cores is None:  # (a py4j round trip)
            self._cores = self._spark.sparkContext.defaultParallelism
        cores = self._cores
        most = max(with_rows.values(), default=0)
        placed = slots is not None or placed_by_reads(readers, len(with_rows), cores, most)
        reads = None
        if slots is None and remote is None and most <= 1:
            # not placed: more tasks with rows than reads and cores to spare, so the
            # reads are split among them rather than the rows shuffled onto them
            reads = self._reads(plan, None if placed else min(len(with_rows), cores))
            if reads is not None and reads.shares:
                trace.debug("batch %d: %d ranges read by %d Spark tasks, each running its "
                            "share of their %d tasks", batch_id, len(ends),
                            len(reads.groups), len(with_rows))
            placed = placed or reads is not None
        # a small batch whose runners read it runs in the driver: no Spark job
        in_driver = False
        warm_up: threading.Event | None = None
        if reads is not None and remote is None and self._driver is not None:
            # (the driver reads each range once: a split read's shares are for cores)
            whole = self._reads(plan) if reads.shares else reads
            if self._driver_ready.is_set():
                if whole is not None and self._driver.takes(whole.records):
                    in_driver, reads = True, whole
            elif not self._driver_warming:
                # the driver's Kafka clients are made beside the query's first batch
                # its runners read, off any batch's path: made by the first batch run
                # in the driver, they took it a second, of latency for each record
                self._driver_warming = True
                warm_up = self._driver_ready
        self._ran_in_driver = in_driver
        if in_driver:
            trace.debug("batch %d: %d records, run in the driver", batch_id,
                        reads.records if reads is not None else 0)
        # the batch's rows for its tasks, unless the runners read them themselves (its
        # two DataFrame calls cost a one-record batch 15-30 ms of the driver's ~155 here)
        mine = batch if reads is not None else _rows_for(batch, plan, columns, slots)
        cut = None if plan.system == "kinesis" else self._cuts.plan(
            batch_id, self._steering.steering_s,
            self._stale)
        executor_state = None if remote is None or checkpoint_id is None else \
            remote.plan(batch_id, checkpoint_id, tasks)
        output: list[Any] = []
        beside: Left | None = None  # the reports the signals' channel carried
        task_rows = self._task_rows() if count_buckets_of is not None else None
        cut_after = self._steering.cut_after_s
        timer = threading.Timer(cut_after, self._cuts.cut_long, (batch_id,)) \
            if cut is not None and cut_after is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        began = time.monotonic()
        try:
            self._process(mine, BatchContext(
                self._pid(), plan.version, batch_id, self._spark, tasks,
                str(states.state_dir) if states and remote is None else None,
                checkpoint_id, placed, cut, executor_state,
                output.append if self.transactions is not None else None, task_rows,
                plan.key_hash, reads, in_driver, warm_up))
            if in_driver and reads is not None and self._driver is not None:
                self.in_driver += 1
                self._driver = self._driver.after(reads.records, time.monotonic() - began)
        finally:
            if timer is not None:
                timer.cancel()
            if cut is not None:
                beside = self._cuts.end(batch_id)
        if task_rows is not None and count_buckets_of is not None \
                and self._buckets is not None:
            self._buckets.add(plan, owned_counts(plan, task_rows.value, set(count_buckets_of)),
                              count_buckets_of, self._spans_read())
        if remote is not None and checkpoint_id is not None:
            remote.batch_done(batch_id, checkpoint_id)  # the snapshots the commit names
        left = self._cuts.left(batch_id, beside) if cut is not None else {}
        # (a batch cut for running long alone measured what fits in a batch)
        timed = self._processed(plan, left) if left and self._cuts.for_time(batch_id) \
            else None
        self._done = advanced(self._done, plan, ends, left)
        checkpoints = plan.commit(ends, left)
        if left:
            # their partitions are read again from where the tasks got to. Before the
            # changes this batch applies as it ends (one adding a task behind that
            # point then reads the partition again from further back), and published
            # with them
            self.running = rewound(self.running, self._done, ends)
            self.boundary.queue(lambda: None)
        for s in plan.starts:
            end = ends.get((s.topic, s.partition))
            if end is not None:
                key = (s.topic, s.partition)
                self.committed[key] = max(self.committed.get(key, end), end)
        if trace.isEnabledFor(logging.DEBUG):
            trace.debug("batch %d v%d cid %s read %s | ran %s | left %s | commit %s",
                        batch_id, plan.version, checkpoint_id, _traced_ranges(
                            self._ranges_read, ends),
                        " ".join(f"{s.task}:{s.partition}>={s.start}" for s in plan.starts),
                        {f"{t}:{p}": o for (t, _, p), o in sorted(left.items())} or "-",
                        " ".join(f"{t}={','.join(o['offset'] for o in c['inputOffsets'])}"
                                 for t, c in sorted(checkpoints.items())) or "-")
        try:
            self.committer.submit(plan.version, checkpoints, checkpoint_id, tuple(output))
        except (Fenced, LeaseLost) as e:
            self._refused(e)
        return bool(left), timed

    def _reads(self, plan: QueryPlan, split: int | None = None) -> TaskReads | None:
        """The batch in flight's reading by its tasks' runners, when they may read it
        (None: the source's rows are processed): grouped as the source planned them, or
        ``split`` among that many Spark tasks (``task_reads.split_reads``)."""
        if self._task_reads is None or plan.system != "kafka" or not self._ranges_read:
            return None
        shares: tuple[frozenset[str], ...] = ()
        if split is None:
            groups = tuple(reads_of({"p": self._ranges_read}, self._planned_readers))
        else:
            ranges = ranges_of({"p": self._ranges_read})
            tasks_of: dict[tuple[str, int], list[str]] = {}
            for s in plan.starts:
                tasks_of.setdefault((s.topic, s.partition), []).append(s.task)
            groups, shares = split_reads(ranges, tasks_of, split)
        if not groups:
            return None
        if self._time_zone is None:
            self._time_zone = str(self._spark.conf.get("spark.sql.session.timeZone"))
        return TaskReads(groups, self._task_reads, Routes.of(plan), self._time_zone, shares)

    def _processed(self, plan: QueryPlan, left: Left) -> int:
        """About how many records the batch in flight processed before it was cut
        (``cuts.processed_records``). Its ranges unknown (the offset log unread): 0, so
        the next batch is smaller (``after_time_cut``): left unmeasured, the limit would
        stay where it ran long, and every batch would be cut and read again."""
        ranges = {split_key(k): (int(r["from"]), int(r["to"]))
                  for k, r in self._ranges_read.items()}
        if not ranges:
            return 0
        tasks: dict[tuple[str, int], list[str]] = {}
        for s in plan.starts:
            tasks.setdefault((s.topic, s.partition), []).append(s.task)
        return processed_records(ranges, left, tasks)

    def _task_rows(self) -> Any:
        """The accumulator a batch's tasks add their rows per task to, emptied."""
        if self._rows_counted is None:
            self._rows_counted = self._spark.sparkContext.accumulator({}, TaskRows())
        self._rows_counted.value = {}
        return self._rows_counted

    def _stale(self) -> bool:
        """Whether the batch in flight was planned before a change of the running tasks,
        or one waits for it (``BatchCuts.plan``)."""
        return (self._planned_under is not None
                and self._planned_under < self.running.source.version) \
            or bool(self.boundary.waiting)

    def log_progress(self) -> None:
        """The progress line of the batches since the last one (at a stop)."""
        self._progress.flush()

    # -- the backlog, for the autosizer

    def backlog(self, progress: dict[str, Any] | None) -> dict[str, dict[str, int]]:
        """Per task, the records behind (``runtime.backlog``); Kinesis also the
        milliseconds behind. Kafka's total is kept for the progress lines."""
        latest = latest_offsets(progress)
        if latest is None:
            return {}
        stats, behind = task_backlog(self.running.plan, latest, self.committed)
        if behind is not None:
            self._behind = behind
        return stats


def _rows_for(batch: DataFrame, plan: QueryPlan, columns: tuple[str, ...],
              slots: dict[str, int] | None) -> DataFrame:
    """The rows of ``batch`` the tasks of ``plan`` run, with their key bucket and task
    (and only a slot's own tasks' with ``slots``)."""
    # one expression list per step: every DataFrame call is a py4j round trip and an
    # analysis of the whole plan in the driver's JVM, and a batch paid ~70 ms for a
    # chain of them at a few records (a profile of bench/peer.py's job at 40 rec/s)
    mine = batch.selectExpr("*", f"{plan.bucket_expr()} AS keyBucket") \
        .where(plan.filter_sql())
    task = f"{plan.task_sql()} AS taskName"
    if slots is not None:  # a slot reads whole partitions: only its own tasks' rows
        return mine.selectExpr("*", task).where(f"({slot_sql(slots)}) = {SLOT}") \
            .selectExpr(*(f"`{c}`" for c in columns))
    return mine.selectExpr(*(task if c == "taskName" else f"`{c}`" for c in columns))


def _resumes(plan: QueryPlan) -> bool:
    """Whether a task of ``plan`` goes on from a checkpoint (a handover, a restart: its
    output was being written), rather than from where a new job starts."""
    return any(s.start not in (EARLIEST, LATEST) for s in plan.starts)


def _measured(batch: DataFrame, kinesis: bool) -> tuple[Ends, Ends, Ends]:
    """A batch's ends, generations and records per partition, by a Spark job over its
    rows."""
    per = batch.groupBy("topic", "partition").agg(
        (F.max("offsetKey") if kinesis else F.max("offset") + 1).alias("end"),
        F.min("gen").alias("gen"), F.count("*").alias("n")).collect()
    # a batch's end per partition: the next offset to read after its last row (Kinesis:
    # an end-of-shard marker's, endingSequenceNumber + 1)
    ends = {(r["topic"], r["partition"]): int(r["end"]) + (1 if kinesis else 0) for r in per}
    gens = {(r["topic"], r["partition"]): int(r["gen"]) for r in per}
    return ends, gens, {(r["topic"], r["partition"]): int(r["n"]) for r in per}


def _traced_ranges(ranges: dict[str, Any], ends: Ends) -> str:
    """A batch's ranges for the trace: ``p[from,to)g`` each (Kafka), else its ends."""
    if ranges:
        return " ".join(f"{k.rpartition('/')[2]}[{r['from']},{r['to']})g{r['g']}"
                        for k, r in sorted(ranges.items()) if int(r["to"]) > int(r["from"]))
    return " ".join(f"{p}:..{e}" for (_, p), e in sorted(ends.items()))


def _age(since: float | None) -> float:
    """Seconds since ``since`` (monotonic), 0 for none."""
    return 0.0 if since is None else round(time.monotonic() - since, 3)
