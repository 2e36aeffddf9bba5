"""The driver's side of task state kept by the executors (``worker.state.executor``): a
worker on a cluster master, whose executors run on other hosts than its driver.

The driver keeps no state files. It knows, per running task, the state its next batch
starts from (its *base*): at the start, the resolved checkpoint's marker or
``stateSources``; after each batch, the snapshot the executor that ran the task reported
(uploaded before its Spark task ended). A commit names, for each task, the newest
snapshot reported by a batch up to the commit's checkpoint id; a task without one
processed no record since its last (``process_task`` never opened its state), so its
last snapshot still pairs with the new offsets, as on a local master.

Standby and warm-up copies live on the executors too: each refresh runs a small Spark
job that fetches every standby's newest committed snapshot onto an executor's disk
(incrementally) and says which it holds; its lag is measured by the driver, against
the offsets of the checkpoint that named it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pyspark.sql import SparkSession

from checkpoint.model import CheckpointId
from worker.state.backup import MARKER_BACKEND, STORE_NAME, state_marker
from worker.state.blobs import BlobStore, open_blob_store
from worker.state.compose import is_own_whole
from worker.state.executor import (
    ExecutorStatePlan,
    Report,
    StateReports,
    TaskBase,
    executor_caches,
    local_state_dir,
    task_folders_locked,
)
from worker.state.gc import BlobCollector, GcPlan
from worker.state.restore import restore_snapshot
from worker.state.tasks import StateConfig, TaskStates, key_space_offsets

log = logging.getLogger("coxswain.worker.state")

T = TypeVar("T")
R = TypeVar("R")


def base_of(task: str, checkpoint: Mapping[str, Any]) -> TaskBase:
    """The state a task starts from, by its resolved checkpoint."""
    marker = state_marker(checkpoint)
    committed = marker
    sources = checkpoint.get("stateSources")
    if sources is not None:
        if not sources:
            return TaskBase()
        if is_own_whole(task, sources):
            marker = state_marker(sources[0])
            return TaskBase(str(sources[0].get("checkpointId")), marker,
                            committed_marker=marker)
        return TaskBase(sources=tuple(sources))
    if marker is None:
        return TaskBase()
    return TaskBase(str(checkpoint.get("checkpointId")), marker, committed_marker=committed)


class Pinning(Protocol):
    """Runs work for tasks on the executors their batches run on (``worker.cluster.placement``)."""

    def run(self, items: Mapping[str, T], fn: Callable[[Iterable[tuple[str, T]]],
                                                        Iterable[R]]) -> list[R]: ...


class ExecutorStates:
    """Bases, reports and commits of the tasks whose state the executors keep."""

    def __init__(self, config: StateConfig, spark: SparkSession,
                 executor_state_dir: str, blobs: BlobStore | None = None,
                 pinning: Pinning | None = None) -> None:
        self.config = config
        # standby copies fetched where their tasks will run (None: any executor)
        self._pinning = pinning
        self._spark = spark
        self.executor_state_dir = executor_state_dir
        self._blobs = blobs or open_blob_store(config.blob_store, config.blob_store_endpoint,
                                               config.blob_store_options)
        self._lock = threading.Lock()
        self._bases: dict[str, TaskBase] = {}
        self._committed: dict[str, str] = {}  # task -> marker of its last acknowledged
        # checkpoint id -> the snapshots its batch reported (task -> report), until the
        # commit that names them is acknowledged
        self._reported: dict[str, dict[str, Report]] = {}
        # made here, once: two made by racing threads (a batch, a standby refresh) would
        # lose one's reports, and a task's commit would carry new offsets with old state
        self._reports: Any = spark.sparkContext.accumulator({}, StateReports())
        self._fetched: dict[str, tuple[str, dict[tuple[str, int, int], int]]] = {}
        self.restores: dict[str, dict[str, Any]] = {}
        self._sizes: dict[str, int] = {}
        self._hosts: dict[str, str] = {}  # task -> the host of the executor that ran it last

    @property
    def state_dir(self) -> Path:
        """(The driver keeps no state: where its executors do, on their hosts.)"""
        return Path(self.executor_state_dir)

    def restore(self, checkpoints: Mapping[str, Mapping[str, Any]],
                keep: AbstractSet[str] = frozenset()) -> None:
        """The tasks of ``checkpoints`` start from their resolved state: the executor
        that runs a task's first batch brings it there (nothing to do here)."""
        with self._lock:
            for task, checkpoint in checkpoints.items():
                base = base_of(task, checkpoint)
                committed = self._committed.get(task) or base.committed_marker
                self._bases[task] = replace(base, committed_marker=committed)

    def plan(self, batch_id: int, checkpoint_id: str, tasks: Sequence[str]
             ) -> ExecutorStatePlan:
        """What batch ``batch_id``'s Spark tasks need for ``tasks``' state."""
        with self._lock:
            bases = {t: self._bases.get(t, TaskBase()) for t in tasks}
        return ExecutorStatePlan(self.executor_state_dir, self.config.blob_store,
                                 self.config.blob_store_endpoint,
                                 self.config.blob_store_options, batch_id, checkpoint_id,
                                 bases, self._reports)

    def batch_done(self, batch_id: int, checkpoint_id: str) -> dict[str, Report]:
        """Take batch ``batch_id``'s reports: each reporting task's next batch starts
        from the snapshot it reported, and the commit of ``checkpoint_id`` names it."""
        reports = {task: r for (b, task), r in self._reports.value.items() if b == batch_id}
        if reports:
            self._reports.value = {k: v for k, v in self._reports.value.items()
                                   if k[0] > batch_id}
        with self._lock:
            for task, report in reports.items():
                self._bases[task] = TaskBase(report.checkpoint_id, report.marker,
                                             committed_marker=self._committed.get(task))
                self._sizes[task] = report.state_bytes
                self._hosts[task] = report.host
                if report.restore != "kept" or task not in self.restores:
                    # the last time the state came from elsewhere (the stats' restores)
                    count = int(self.restores.get(task, {}).get("count", 0)) + 1
                    self.restores[task] = {
                        "source": report.restore, "bytes": report.restore_bytes,
                        "seconds": report.seconds, "host": report.host, "count": count}
            if reports:
                self._reported[checkpoint_id] = reports
        return reports

    def back_up(self, checkpoint_id: str, checkpoints: dict[str, Any]) -> dict[str, Any]:
        """``checkpoints`` with each task's newest snapshot reported by a batch up to
        ``checkpoint_id`` (already uploaded by its executor)."""
        limit = CheckpointId.parse(checkpoint_id)
        out = dict(checkpoints)
        with self._lock:
            newest: dict[str, Report] = {}
            for cid in sorted(self._reported, key=CheckpointId.parse):
                if CheckpointId.parse(cid) <= limit:
                    newest.update(self._reported[cid])
        for task, checkpoint in checkpoints.items():
            report = newest.get(task)
            if report is not None:
                out[task] = {**checkpoint, "checkpointId": report.checkpoint_id,
                             "stateCheckpointMarkers": {
                                 MARKER_BACKEND: {STORE_NAME: report.marker}}}
        return out

    def committed(self, checkpoints: Mapping[str, Any]) -> None:
        """A commit carrying ``checkpoints`` was acknowledged."""
        with self._lock:
            acknowledged: CheckpointId | None = None
            for task, checkpoint in checkpoints.items():
                marker = state_marker(checkpoint)
                if marker is None:
                    continue
                self._committed[task] = marker
                base = self._bases.get(task)
                if base is not None:
                    self._bases[task] = replace(base, committed_marker=marker)
                cid = CheckpointId.parse(str(checkpoint["checkpointId"]))
                acknowledged = cid if acknowledged is None else max(acknowledged, cid)
            if acknowledged is not None:
                for raw in [c for c in self._reported
                            if CheckpointId.parse(c) <= acknowledged]:
                    del self._reported[raw]

    def hosts(self, tasks: Sequence[str]) -> dict[str, str]:
        """The host of the executor that ran each task's last batch with state (pinned:
        where its state is)."""
        with self._lock:
            return {t: self._hosts[t] for t in tasks if t in self._hosts}

    def sizes(self, tasks: Sequence[str]) -> dict[str, int]:
        """Bytes of each task's last reported snapshot."""
        with self._lock:
            return {t: self._sizes[t] for t in tasks if t in self._sizes}

    def refresh(self, actives: Sequence[str], standbys: Sequence[str],
                read_checkpoints: Callable[[list[str]], Mapping[str, Any]],
                known: AbstractSet[str] | None = None) -> dict[str, int]:
        """Fetch every standby's newest committed snapshot onto an executor (a Spark job
        of one task per standby) and measure the lags: actives 0; a standby by how many
        offsets the checkpoint of the snapshot it holds is behind the latest."""
        lags = dict.fromkeys(actives, 0)
        names = sorted(set(standbys) - set(actives))
        if not names:
            return lags
        committed = read_checkpoints(names)
        wanted: dict[str, tuple[str, str]] = {}
        for task in names:
            own = _own_snapshot(task, committed.get(task) or {})
            if own is not None:
                wanted[task] = own
        held = self._fetch(wanted) if wanted else {}
        for task in names:
            checkpoint = committed.get(task) or {}
            latest = key_space_offsets(checkpoint.get("inputOffsets") or ())
            if task in held:
                self._fetched[task] = (held[task], latest)
            fetched = self._fetched.get(task)
            if fetched is None or not latest:
                continue
            cid, offsets = fetched
            if cid == checkpoint.get("checkpointId"):
                lags[task] = 0
            elif set(offsets) == set(latest):
                lags[task] = sum(max(0, latest[k] - offsets[k]) for k in latest)
        return lags

    def _fetch(self, wanted: Mapping[str, tuple[str, str]]) -> dict[str, str]:
        """Standby copies fetched onto the executors: task -> the checkpoint id held."""
        plan = self.plan(-1, "0-0", sorted(wanted))
        items = sorted(wanted.items())
        fetch = _fetcher(plan)
        if self._pinning is not None:
            fetched = self._pinning.run(dict(items), fetch)
        else:
            rdd = self._spark.sparkContext.parallelize(items, max(1, len(items)))
            fetched = rdd.mapPartitions(fetch).collect()
        done: dict[str, str] = {}
        for task, cid, error in fetched:
            if error:
                log.warning("standby %s: state not fetched on an executor: %s", task, error)
            else:
                done[task] = cid
        return done

    def collect_garbage(self, tasks: Mapping[str, Mapping[str, Any]]) -> GcPlan:
        """As ``TaskStates.collect_garbage``: the driver reaches the blob store too."""
        markers = {m for checkpoint in tasks.values() if (m := state_marker(checkpoint))}
        return BlobCollector(self._blobs, self.config.gc_grace_s).collect(markers)


#: who keeps a stateful worker's task state: the driver (``local[N]``) or its executors
StateKeeping = TaskStates | ExecutorStates


def _own_snapshot(task: str, checkpoint: Mapping[str, Any]) -> tuple[str, str] | None:
    """(checkpoint id, marker) of the task's own committed snapshot (None: it has none,
    or its state is still to be composed from other tasks' snapshots)."""
    sources = checkpoint.get("stateSources")
    if sources is not None:
        if not sources or not is_own_whole(task, sources):
            return None
        checkpoint = sources[0]
    marker = state_marker(checkpoint)
    return None if marker is None else (str(checkpoint.get("checkpointId")), marker)


def _fetcher(plan: ExecutorStatePlan
             ) -> Callable[[Iterable[tuple[str, tuple[str, str]]]],
                           Iterable[tuple[str, str, str]]]:
    def run(items: Iterable[tuple[str, tuple[str, str]]]) -> Iterator[tuple[str, str, str]]:
        caches = executor_caches()
        state_dir = local_state_dir(plan)
        for task, (cid, marker) in items:
            try:
                with task_folders_locked(state_dir, [task]):
                    restore_snapshot(state_dir, marker, caches.blobs(plan), caches.digests)
                yield task, cid, ""
            except Exception as e:  # reported: the next refresh tries again
                yield task, cid, f"{type(e).__name__}: {e}"

    return run
