"""One worker = one PySpark application acting as one Coxswain processor, with one
Structured Streaming query for its whole life.

Life of a worker: register; follow the job models on the control plane's threads
(``worker.runtime.control``: the long poll, heartbeats with lags and stats, standby
copies); change the running tasks at batch boundaries as the models say
(``worker.runtime.handover``): the query's source reads the new partitions from its next
batch, the tasks the worker keeps go on uninterrupted. A lost lease (found by any
request) or a fenced commit ends processing under that lease, never the worker: it
registers again and carries on with the same query. Stopping hands every task over
(the last commit acknowledged), leaves and stops the query.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from worker import batch_size
from worker.client import CoordinatorClient, Fenced, LeaseLost
from worker.cluster.placement import Placement
from worker.cut_signals import CutSignals, FolderSignals, HttpSignals
from worker.output.exactly_once import Fencing, ensure_log_topic
from worker.output.transactions import TransactionalOutput
from worker.runtime.app import is_local_master
from worker.runtime.batches import BatchRunner
from worker.runtime.bucket_counts import BucketCounts
from worker.runtime.contexts import ProcessBatch, WorkerConfig
from worker.runtime.control import Heartbeats, ModelFollower, StateKeeper
from worker.runtime.driver_batches import DriverBatches
from worker.runtime.handover import (
    HandingOver,
    Handover,
    NotAStatefulJob,
    QueryDied,
    QueryRestarts,
)
from worker.runtime.query import SourceQuery
from worker.runtime.query_failures import RestartPolicy, Restarts
from worker.sources.jvm_kafka import quiet_group_warning, read_ranges
from worker.state.remote import ExecutorStates, StateKeeping
from worker.state.tasks import TaskStates

log = logging.getLogger("coxswain.worker")


class Worker:
    """Runs one processor until :meth:`stop`."""

    def __init__(self, config: WorkerConfig, process_batch: ProcessBatch,
                 spark: SparkSession, client: CoordinatorClient | None = None,
                 cut_signals: CutSignals | None = None) -> None:
        self.config = config
        self._client = client or CoordinatorClient(
            config.coordinator, config.token,
            verify=config.tls.context() if config.tls is not None else True)
        self._stop = threading.Event()
        self._over = threading.Event()  # this lease is over (lost, or a commit fenced)
        self.processor_id = config.processor_id or ""
        # task state on the driver's disk, which local[N] executors share; on a cluster
        # master, kept by the executors where the tasks run
        self._states: StateKeeping | None = None
        # on a cluster master, each task pinned to one executor while it lives
        self._placement: Placement | None = None
        if config.state is not None:
            if is_local_master(config.spark_master):
                self._states = TaskStates(config.state)
            else:
                self._placement = Placement(spark, config.kafka)
                self._states = ExecutorStates(config.state, spark,
                                              config.executor_state_dir,
                                              pinning=self._placement)
        # the query hands batches to the runner, which steers the query's batch size
        self._query = SourceQuery(spark, config, self._on_batch)
        # how the driver tells executors a batch is cut (``worker.cut_signals``): files
        # where they share its disk, else its HTTP answer
        self._signals = cut_signals or default_signals(spark, config, self._query)
        reader_group = f"coxswain-reader-{uuid.uuid4().hex[:12]}"  # (--kafka-reader jvm)
        if config.kafka_reader == "jvm" and self._placement is None:
            quiet_group_warning(spark)
            log.info("Kafka batches are read by Spark's Kafka connector (group %s)",
                     reader_group)
        # a fenced commit ends this lease as a lost one does: register again
        self._runner = BatchRunner(
            spark, process_batch, self._client, self._states,
            self._over, config.max_commit_delay_s,
            config.trigger_interval_s, lambda: self.processor_id, self._query.apply,
            batch_size.start(config.target_batch_s or batch_size.default_target_s(config.api),
                             config.max_offsets_per_trigger,
                             timed_cuts=config.api == "task"),  # (cuts: process_task's)
            self._query.batch_offsets, self._query.limit, self._signals,
            (lambda planned: read_ranges(spark, config.kafka, reader_group,
                                         planned))
            # (pinned tasks read their own ranges: no batch read planned for them)
            if config.kafka_reader == "jvm" and self._placement is None else None,
            self._placement, BucketCounts(config.bucket_sample_interval_s,
                                          in_tasks=config.api == "task"),
            config.task_reads,
            # (a local master's: on a cluster the tasks run on the executors' hosts and
            # Python, which the driver's may not be; taskHosts reports those hosts)
            DriverBatches(config.driver_batch_records)
            if config.driver_batch_records > 0 and config.task_reads is not None
            and is_local_master(config.spark_master) else None)
        self._keeper: StateKeeper | None = None
        self._handing_over = HandingOver()  # reported in the heartbeats
        # a query dying of anything but the app's code is started again (bounded)
        self._restarts = QueryRestarts(
            Restarts(RestartPolicy(config.query_restarts, config.query_restart_window_s)),
            config.app_files)
        self._left = False

    @property
    def query(self) -> Any:
        """The worker's one streaming query (None before its first tasks)."""
        return self._query.query

    def _on_batch(self, batch: DataFrame, batch_id: int) -> None:
        self._runner.on_batch(batch, batch_id)

    # -- lifecycle

    def stop(self) -> None:
        """Ask the worker to stop (it hands over its tasks and leaves)."""
        self._stop.set()

    def run(self) -> None:
        """Register and process until stopped."""
        log.info("worker process %d starting", os.getpid())
        if self.config.exactly_once is not None:
            ensure_log_topic(self.config.exactly_once)
        try:
            while not self._stop.is_set():
                self._one_lease()
        finally:
            self._hand_over_everything("stopped")
            self._leave()
            self._query.stop()
            self._signals.close()
            self._client.close()

    def _leave(self) -> None:
        """Leave the group once (a rebalance moves the tasks at once)."""
        if self._left or not self.processor_id:
            return
        self._left = True
        try:
            self._client.leave(self.processor_id)
        except Exception as e:
            log.warning("leaving failed: %s", e)
        else:
            log.info("%s left the group", self.processor_id)

    def _one_lease(self) -> None:
        """Register, then follow the job models until this lease is over."""
        reg = self._client.register(self.processor_id or self.config.processor_id,
                                    self.config.location)
        self.processor_id = reg.processor_id
        self._over.clear()
        log.info("registered as %s at %s", self.processor_id, self.config.location)
        eo = self.config.exactly_once
        fencing = None
        if eo is None:
            self._runner.renew()
        else:
            # before anything is acked: take the id over (which fences this processor's
            # earlier incarnation, dead or a zombie), then recover what it committed
            fencing = Fencing(eo, self._client)
            self._runner.renew(TransactionalOutput(
                eo.bootstrap, eo.transactional_id(self.processor_id), eo.output_topic,
                eo.log_topic).start())
            fencing.recover([self.processor_id])
        interval_s = reg.heartbeat_interval_ms / 1000
        follower = ModelFollower(self._client, self.processor_id, self._over).start()
        keeper = None
        if self._states is not None:
            keeper = StateKeeper(self._states, self._client, self.processor_id, interval_s,
                                 self._over, lambda: sorted(self._runner.running.tasks),
                                 lambda: follower.latest).start()
        self._keeper = keeper
        presender = None
        if isinstance(self._states, TaskStates):  # the live stores on this disk
            presender = self._states.presender.start(
                lambda: sorted(self._runner.running.tasks), self._over)
        beats = Heartbeats(self._client, self.processor_id, interval_s, self._over,
                           self._lags, self._stats).start()
        try:
            Handover(self._client, self.processor_id, self._runner, self._query,
                     self._states, follower, self.config.max_commit_delay_s, fencing,
                     self._handing_over, self._restarts).run(
                lambda: self._stop.is_set() or self._over.is_set())
        except (LeaseLost, Fenced) as e:  # an ack's answer
            log.error("lease lost (%s): stopping processing and registering again", e)
        except NotAStatefulJob as e:  # nothing ran: leave, and the process exits 1
            log.error("refusing to run: %s", e)
            self._stop.set()
            raise
        except QueryDied:  # the app's code failed, or restarts are spent: leave, exit 1
            self._stop.set()
            raise
        finally:
            # stopping: hand over while the lease is still renewed
            self._hand_over_everything("stopping" if self._stop.is_set() else "lease over")
            if self._stop.is_set():
                # leave now, before the long poll returns: its connection closing would
                # otherwise remove this processor first (and the leave find it gone)
                self._leave()
            self._over.set()
            beats.join(10)
            follower.join(30)
            if keeper is not None:
                keeper.join(30)
            if presender is not None:
                presender.join(30)

    def _hand_over_everything(self, why: str) -> None:
        """No task runs any more; their last commit awaited (it fails if the lease is
        gone: then the next owner starts from the commit before)."""
        running = self._runner.running
        self._runner.log_progress()
        if not running.tasks:
            return
        log.info("%s: handing over %d tasks", why, len(running.tasks))
        self._runner.remove(running.tasks)
        self._runner.flush(self.config.max_commit_delay_s)

    # -- what the heartbeats carry

    def _lags(self) -> dict[str, int] | None:
        if self._states is None:
            return None
        lags = dict(self._keeper.lags) if self._keeper is not None else {}
        for task in self._runner.running.tasks:
            lags[task] = 0  # an active task's state is its own
        return lags

    def _stats(self) -> dict[str, Any]:
        stats = dict(self._runner.stats)
        stats.update(self._restarts.stats())
        handing_over = self._handing_over.stat()
        if handing_over is not None:  # the leader waits for it past the barrier timeout
            stats["handingOver"] = handing_over
        if stats:  # after the first batch: how busy since (0 when idle)
            stats["busy"] = round(self._runner.busy.share(time.monotonic()), 3)
            progress = self._query.progress()
            stats.update(self._runner.backlog(progress))
            if progress and isinstance(progress.get("durationMs"), dict):
                # where the last trigger's time went (Spark's own breakdown)
                stats["triggerMs"] = {k: int(v) for k, v in progress["durationMs"].items()
                                      if isinstance(v, (int, float))}
        if self._states is not None:  # the running tasks' restores and sizes, now
            names = sorted(self._runner.running.tasks)
            restores = self._states.restores
            stats["stateRestores"] = {t: restores[t] for t in names if t in restores}
            stats["stateBytes"] = self._states.sizes(names)
            if self.config.task_hosts and isinstance(self._states, ExecutorStates):
                # where each task's state is: the leader records it as the task's
                # locality (coordinator.locality.TASK_HOSTS)
                stats["taskHosts"] = self._states.hosts(names)
        return stats


def default_signals(spark: SparkSession, config: WorkerConfig, query: SourceQuery
                    ) -> CutSignals:
    """Files in the query's folder on a local master; else served over HTTP at the
    address the executors reach the driver at."""
    if is_local_master(config.spark_master):
        return FolderSignals(query.cut_folder)
    return HttpSignals(spark.conf.get("spark.driver.host") or "127.0.0.1")
