"""Task state where the task runs: in the executor's Python worker, on the executor's disk
(a worker on a cluster master, whose executors are on other hosts than its driver).

The driver plans; the executor that runs a task's rows keeps its state. For each batch
the driver names, per task, the state the batch starts from (its *base*: the snapshot
its previous batch reported, or at a task's first batch its resolved checkpoint's
marker or ``stateSources``), and in the Spark task that runs the task's rows:

1. the live store is brought to the base: used as it is when this disk holds it at the
   base already (the task ran here last: nothing moves), else restored from the blob
   store (local snapshot files first, ``restore``) or composed from the sources
   (``compose``), or started empty;
2. ``process_task`` runs with it;
3. the batch's writes are applied, snapshotted under the batch's checkpoint id and the
   snapshot **uploaded, before the Spark task ends**; the task reports (checkpoint id,
   marker) through an accumulator, which Spark applies for a successful attempt only.

So the driver commits offsets only with state some executor backed up: a failed upload
fails the Spark task (Spark tries it again, on any executor: the base is in the blob
store), never a commit that skips the task. The base is in the blob store before the
next batch can start, so a task may run on any executor from batch to batch; it costs a
restore only when it moves (incremental: files of an older copy here are reused).

Crash safety: ``live.base`` names the state the live store holds; it is removed before a
restore and set to ``dirty`` before a batch's writes are applied, and names the new
snapshot only once it is taken, so a live store left half-restored or ahead of its
snapshot is never taken for a base. Tasks are locked per folder across the executor's
Python worker processes (``fcntl``), sources before their compositions, in name order.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.accumulators import AccumulatorParam

from grouping.key_hash import KeyHash
from worker.state.backup import SnapshotIndex, Uploader, state_marker
from worker.state.blobs import BlobStore, BlobStoreOptions, open_blob_store
from worker.state.compose import compose
from worker.state.restore import open_live, restore_snapshot
from worker.state.snapshot import (
    Digests,
    claim_task_dir,
    index_path,
    snapshot_dir,
    task_dir,
)
from worker.state.store import COMPACT_BYTES_PER_BATCH, TaskStore

log = logging.getLogger("coxswain.worker.state")

#: the file naming the state a task's live store holds (a base's key, or ``dirty``)
BASE_FILE = "live.base"
DIRTY = "dirty"
EMPTY = "empty"


@dataclass(frozen=True)
class TaskBase:
    """The state a task's batch starts from: a snapshot (``checkpoint_id`` and the
    ``marker`` of its index in the blob store), the ``sources`` to compose it from (a
    split's or merge's first batch), or nothing (empty)."""

    checkpoint_id: str | None = None
    marker: str | None = None
    sources: tuple[Mapping[str, Any], ...] = ()
    # the marker of the task's last committed snapshot: its blobs are the only ones an
    # upload may reuse without sending them (``backup.Uploader``: the collector keeps
    # only what committed checkpoints name)
    committed_marker: str | None = None

    @property
    def key(self) -> str:
        """What ``live.base`` says when the live store holds this state."""
        if self.marker is not None and self.checkpoint_id is not None:
            return self.checkpoint_id
        if self.sources:
            canonical = json.dumps(list(self.sources), sort_keys=True).encode()
            return "composed-" + hashlib.sha256(canonical).hexdigest()[:32]
        return EMPTY


@dataclass(frozen=True)
class Report:
    """What an executor did with a task's state in one batch."""

    checkpoint_id: str
    marker: str
    state_bytes: int
    uploaded_bytes: int
    uploaded_files: int
    restore: str  # "kept" (the base was here), "local", "partial", "remote", "composed",
    #             "empty"
    restore_bytes: int
    seconds: float  # restore + snapshot + upload
    host: str


#: (batch id, task) -> its report
Reports = dict[tuple[int, str], Report]


class StateReports(AccumulatorParam):  # type: ignore[type-arg]  # (PySpark's, untyped)
    """Merges reports of tasks (one report per task and batch: a later one wins)."""

    def zero(self, value: Reports) -> Reports:
        return {}

    def addInPlace(self, a: Reports, b: Reports) -> Reports:  # noqa: N802 (PySpark's API)
        a.update(b)
        return a


@dataclass(frozen=True)
class ExecutorStatePlan:
    """What a batch's Spark tasks need to keep their tasks' state where they run."""

    state_dir: str  # on the executor's host (relative: to the executor's folder)
    blob_store: str
    blob_store_endpoint: str | None
    blob_store_options: BlobStoreOptions
    batch_id: int
    checkpoint_id: str
    bases: Mapping[str, TaskBase]
    reports: Any = field(default=None, compare=False)  # a pyspark Accumulator[Reports]

    def base(self, task: str) -> TaskBase:
        return self.bases.get(task, TaskBase())


class _ProcessCaches:
    """Per Python worker process (reused by Spark from task to task): blob store
    clients and file digests, so an upload hashes only files it has not seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stores: dict[tuple[str, str | None], BlobStore] = {}
        self.digests = Digests()

    def blobs(self, plan: ExecutorStatePlan) -> BlobStore:
        key = (plan.blob_store, plan.blob_store_endpoint)
        with self._lock:
            store = self._stores.get(key)
            if store is None:
                store = open_blob_store(plan.blob_store, plan.blob_store_endpoint,
                                        plan.blob_store_options)
                self._stores[key] = store
            return store


_CACHES = _ProcessCaches()  # one per Python worker process, as the Kafka consumer pool


def executor_caches() -> _ProcessCaches:
    """This Python worker process's caches."""
    return _CACHES


def local_state_dir(plan: ExecutorStatePlan) -> Path:
    """The plan's state folder on this host (``~`` and ``$VARS`` expanded here; a
    relative one is under the executor's own folder)."""
    return Path(os.path.expandvars(os.path.expanduser(plan.state_dir))).resolve()


@contextlib.contextmanager
def task_folders_locked(state_dir: Path, tasks: Sequence[str]) -> Iterator[None]:
    """Exclusive locks on ``tasks``' folders across processes, taken in name order."""
    locks = state_dir / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    held: list[int] = []
    try:
        for name in sorted(set(tasks)):
            fd = os.open(locks / task_dir(Path(""), name).name, os.O_CREAT | os.O_RDWR, 0o644)
            held.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in reversed(held):
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def held_base(state_dir: Path, task: str) -> str | None:
    """The key of the state ``task``'s live store holds here (None: none, or unknown)."""
    try:
        text = (task_dir(state_dir, task) / BASE_FILE).read_text().strip()
    except OSError:
        return None
    return text if text and text != DIRTY and (task_dir(state_dir, task) / "live").is_dir() \
        else None


def _set_base(state_dir: Path, task: str, key: str | None) -> None:
    path = claim_task_dir(state_dir, task) / BASE_FILE
    if key is None:
        path.unlink(missing_ok=True)
        return
    part = path.with_name(BASE_FILE + ".part")
    part.write_text(key)
    os.replace(part, path)


def bring_to_base(state_dir: Path, task: str, base: TaskBase, blobs: BlobStore,
                  digests: Digests) -> tuple[str, int]:
    """Make ``task``'s live store hold ``base`` (its folders locked by the caller);
    (how: ``kept``, a restore's source, ``composed`` or ``empty``; bytes downloaded)."""
    if held_base(state_dir, task) == base.key:
        return "kept", 0
    _set_base(state_dir, task, None)  # a crash from here on leaves no claim
    if base.marker is not None and base.checkpoint_id is not None:
        result = restore_snapshot(state_dir, base.marker, blobs, digests)
        open_live(state_dir, task, result.folder, compact=False).close()
        how, moved = result.source, result.downloaded_bytes
    elif base.sources:
        live = claim_task_dir(state_dir, task) / "live"
        done = compose(state_dir, task, base.sources, blobs, digests, live)
        how, moved = "composed", done.downloaded_bytes
    else:
        open_live(state_dir, task, None, compact=False).close()
        how, moved = EMPTY, 0
    _set_base(state_dir, task, base.key)
    return how, moved


@contextlib.contextmanager
def executor_task_state(plan: ExecutorStatePlan, task: str,
                        caches: _ProcessCaches | None = None,
                        key_hash: KeyHash | None = None
                        ) -> Iterator[Callable[[], TaskStore]]:
    """``task``'s state for one batch's calls of ``process_task`` on this executor: on
    first use its live store is brought to the batch's base; if it was used, the
    batch's writes are applied, snapshotted, uploaded and reported at the end (a failure
    anywhere discards them and fails the Spark task)."""
    caches = caches or _CACHES
    state_dir = local_state_dir(plan)
    base = plan.base(task)
    opened: list[TaskStore] = []
    restored: list[tuple[str, int]] = []
    started = time.perf_counter()
    sources = [str(s.get("taskName")) for s in base.sources]
    with task_folders_locked(state_dir, [task, *sources]):

        def store() -> TaskStore:
            if not opened:
                restored.append(bring_to_base(state_dir, task, base, caches.blobs(plan),
                                              caches.digests))
                opened.append(TaskStore(task_dir(state_dir, task) / "live", key_hash))
            return opened[0]

        try:
            yield store
            if opened:
                _set_base(state_dir, task, DIRTY)  # ahead of every snapshot from here
                opened[0].commit()
                opened[0].compact_dropped(COMPACT_BYTES_PER_BATCH)
                report = _snapshot_and_upload(plan, state_dir, task, base, opened[0],
                                              caches, restored[0], started)
                plan.reports.add({(plan.batch_id, task): report})
        except BaseException:
            if opened:
                opened[0].discard()
            raise
        finally:
            if opened:
                opened[0].close()


def _snapshot_and_upload(plan: ExecutorStatePlan, state_dir: Path, task: str,
                         base: TaskBase, store: TaskStore, caches: _ProcessCaches,
                         restored: tuple[str, int], started: float) -> Report:
    folder = snapshot_dir(state_dir, task, plan.checkpoint_id)
    shutil.rmtree(folder, ignore_errors=True)  # an earlier attempt's
    store.snapshot(folder)
    blobs = caches.blobs(plan)
    uploader = Uploader(blobs)
    if base.committed_marker is not None:
        uploader.committed(_index(state_dir, task, base.committed_marker, blobs))
    elif base.sources:  # a composed task's first upload: its sources' blobs are reused
        uploader.inherits(task, [
            _index(state_dir, str(s.get("taskName")), marker, blobs)
            for s in base.sources if (marker := state_marker(s)) is not None])
    result = uploader.upload(task, plan.checkpoint_id, folder, caches.digests)
    index_path(folder).write_bytes(result.index_bytes)
    _set_base(state_dir, task, plan.checkpoint_id)
    _drop_older(state_dir, task, keep={plan.checkpoint_id, base.checkpoint_id})
    return Report(plan.checkpoint_id, result.marker, result.index.size,
                  result.uploaded_bytes, result.uploaded_files, restored[0], restored[1],
                  round(time.perf_counter() - started, 3), socket.gethostname())


def _index(state_dir: Path, task: str, marker: str, blobs: BlobStore) -> SnapshotIndex:
    """The index ``marker`` (one of ``task``'s) names: from this disk when its snapshot is
    here, else from the blob store."""
    checkpoint_id = marker.rpartition("/")[2].removesuffix(".json")
    local = index_path(snapshot_dir(state_dir, task, checkpoint_id))
    with contextlib.suppress(OSError, ValueError):
        index = SnapshotIndex.from_bytes(local.read_bytes())
        if index.task_name == task:
            return index
    return SnapshotIndex.from_bytes(blobs.get(marker))


def _drop_older(state_dir: Path, task: str, keep: set[str | None]) -> None:
    """The task's local snapshots other than ``keep`` (the new one, and the base a retry
    of this batch would start from)."""
    root = task_dir(state_dir, task) / "snapshots"
    if not root.exists():
        return
    for folder in root.iterdir():
        if folder.is_dir() and folder.name not in keep and not folder.name.endswith(
                ".partial"):
            shutil.rmtree(folder, ignore_errors=True)
            index_path(folder).unlink(missing_ok=True)
