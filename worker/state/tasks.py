"""The worker's side of task state, around each query and commit (SAMZA-2591's phases).

* Query start: every active task's live store is rebuilt from its committed snapshot
  (the marker in its checkpoint), local files first: ``restore``.
* After a batch, in the Spark task that ran ``process_task``: the batch's writes are
  applied and a snapshot is taken (``task_state``): the sync phase.
* The commit, in the commit thread while the next batch runs: each task's newest
  snapshot not yet committed, up to this commit's checkpoint id, is uploaded and named in
  the commit (``back_up``): the async phase. A task with no newer snapshot processed no
  record since its last one, so that snapshot still pairs with the new offsets.
* Once the coordinator acknowledged a commit, older local snapshots go (``committed``);
  the committed one stays, for a restore on this host at zero cost.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoint.errors import CheckpointFormatError
from checkpoint.model import CheckpointId
from grouping.key_hash import KeyHash
from worker.state.backup import (
    MARKER_BACKEND,
    STORE_NAME,
    SnapshotIndex,
    Uploader,
    state_marker,
)
from worker.state.blobs import BlobStore, BlobStoreOptions, open_blob_store
from worker.state.compose import compose, is_own_whole
from worker.state.gc import BlobCollector, GcPlan
from worker.state.locks import TaskFolderLocks
from worker.state.presend import PreSender
from worker.state.restore import RestoreResult, open_live, restore_snapshot
from worker.state.snapshot import (
    Digests,
    FileInfo,
    claim_task_dir,
    files_in,
    held_tasks,
    index_path,
    inventory,
    snapshot_dir,
    task_dir,
)
from worker.state.staging import Staging
from worker.state.store import COMPACT_BYTES_PER_BATCH, TaskStore
from worker.state.trash import Trash

log = logging.getLogger("coxswain.worker.state")


@dataclass(frozen=True, slots=True)
class StateConfig:
    """Where a stateful worker keeps and backs up its tasks' state."""

    state_dir: Path
    blob_store: str  # file:///dir or s3://bucket/prefix
    blob_store_endpoint: str | None = None
    gc_interval_s: float = 600.0  # how often the collecting processor collects (0: never)
    gc_grace_s: float = 3600.0  # indexes and blobs younger than this are kept
    blob_store_options: BlobStoreOptions = field(default_factory=BlobStoreOptions)


COMPOSED_STANDBY_ID = "0-0"  # older than any real checkpoint id


def _plan(task: str, checkpoint: Mapping[str, Any]
          ) -> tuple[str | None, Sequence[Mapping[str, Any]]]:
    """(the task's own snapshot marker, or the sources to compose from) of a resolved
    checkpoint: ``stateSources`` when the coordinator gives them (``--stateful``)."""
    sources = checkpoint.get("stateSources")
    if sources is None:
        return state_marker(checkpoint), ()
    if not sources:
        return None, ()
    if is_own_whole(task, sources):
        return state_marker(sources[0]), ()
    return None, sources


def _source_tasks(task: str, checkpoint: Mapping[str, Any]) -> set[str]:
    """The tasks whose snapshots ``task``'s state is built from (none: its own)."""
    return {str(p.get("taskName")) for p in _plan(task, checkpoint)[1]}


def restore_groups(checkpoints: Mapping[str, Mapping[str, Any]]) -> list[set[str]]:
    """The tasks of ``checkpoints`` in groups to restore side by side: every task built
    from its own snapshot alone (one big state then holds up no other task: a survivor
    running a killed worker's small tasks while it restores a big one); tasks built from
    other tasks' snapshots together when they share a source (a split's children: one
    download of the parent serves all), apart when not (a merge's tasks)."""
    groups: list[tuple[set[str], set[str]]] = []  # (tasks, the sources they are built from)
    for task, checkpoint in sorted(checkpoints.items()):
        sources = _source_tasks(task, checkpoint)
        joined = [g for g in groups if sources & g[1]]
        tasks, used = {task}, set(sources)
        for g in joined:
            groups.remove(g)
            tasks |= g[0]
            used |= g[1]
        groups.append((tasks, used))
    return sorted((tasks for tasks, _ in groups), key=lambda g: (len(g) > 1, sorted(g)))


def new_checkpoint_id() -> str:
    """A checkpoint id for the batch about to run (ordered by time)."""
    return str(CheckpointId.of(time.time_ns()))


class TaskStates:
    """Restores, backups and clean-up of this worker's task state."""

    def __init__(self, config: StateConfig, blobs: BlobStore | None = None) -> None:
        self.config = config
        self._blobs = blobs or open_blob_store(config.blob_store, config.blob_store_endpoint,
                                               config.blob_store_options)
        self._digests = Digests()
        # the running tasks' new files sent while their batches run (started per lease)
        self.presender = PreSender(self._blobs, self._digests,
                                   lambda task: task_dir(self.state_dir, task) / "live",
                                   config.gc_grace_s)
        # one pool for every upload of this worker's commits (its threads start once)
        self._uploader = Uploader(self._blobs, pool=ThreadPoolExecutor(
            8, thread_name_prefix="upload"), sent=self.presender.sent)
        self._committed: dict[str, CheckpointId] = {}  # task -> its last acknowledged id
        self._uploaded: dict[str, SnapshotIndex] = {}  # task -> its newest unacknowledged
        self._lock = threading.Lock()
        # restores and standby refreshes build task folders (and a composition reads its
        # source tasks' folders, which a restore then deletes): one build per folder at a
        # time, different tasks side by side (a 100 MB restore must not hold up a small
        # one, say the tasks a survivor gains from a killed worker)
        self._folders = TaskFolderLocks()
        self._trash = Trash(config.state_dir)
        self._staging = Staging(config.state_dir, self._trash)
        self._builds = itertools.count()
        self._built: dict[str, int] = {}  # task -> when its live store was last restored
        self._composed: dict[str, tuple[tuple[str, str], ...]] = {}  # standby -> sources
        # task -> its composed snapshot being linked (a split child's, after its start)
        self._linking: dict[str, Future[None]] = {}
        self.restores: dict[str, dict[str, Any]] = {}  # task -> figures of its last restore
        self.uploaded: dict[str, int] = {}  # task -> bytes its last backup sent

    @property
    def state_dir(self) -> Path:
        """The processor's state dir."""
        return self.config.state_dir

    def restore(self, checkpoints: Mapping[str, Mapping[str, Any]],
                keep: AbstractSet[str] = frozenset()) -> None:
        """Rebuild the live store of every task in ``checkpoints`` (task -> its resolved
        checkpoint) from its committed snapshot, or, after a split, merge or reshard,
        from the snapshots its ``stateSources`` name, filtered by key bucket (and hash
        key); a task without any starts empty. Source tasks' local copies are deleted
        afterwards unless in ``checkpoints`` or ``keep`` (this processor's tasks) or restored
        as tasks of their own by a restore beside this one."""
        sources_used: set[str] = set()
        started = next(self._builds)
        present: dict[str, RestoreResult] = {}  # source snapshots made present, by marker
        cuttable: dict[Path, bool] = {}  # source folders cut by key range unopened
        for task, checkpoint in sorted(checkpoints.items()):
            marker, parts = _plan(task, checkpoint)
            sources = _source_tasks(task, checkpoint)
            self._settle(task, quietly=True)  # an earlier build's snapshot, still linking
            with self._folders.hold({task} | sources):
                if parts:
                    sources_used |= sources
                    self._restore_composed(task, checkpoint, parts, present, cuttable)
                else:
                    self._restore_own(task, marker, checkpoint.get("inputOffsets", ()))
                self._built[task] = next(self._builds)
        with self._lock:
            linking = [self._linking[t] for t in checkpoints if t in self._linking]

        def clean_up() -> None:
            for future in linking:  # they link from the sources' folders
                future.exception()
            for name in sources_used:  # copies of their snapshots staged and not taken
                self._staging.discard(task_dir(self.state_dir, name))
            # the source tasks' copies served their purpose (older factors' tasks),
            # unless a restore beside this one made one of them a task of this
            # processor again
            for name in sources_used - set(checkpoints) - set(keep):
                with self._folders.hold({name}):
                    if self._built.get(name, -1) < started:
                        self._trash.discard(task_dir(self.state_dir, name))  # off the pause

        def clean_up_logged() -> None:
            try:
                clean_up()
            except Exception as e:  # on a thread of its own: said, not lost
                log.warning("the source tasks' folders of a restore not cleaned up "
                            "(%s: %s): left on disk",
                            type(e).__name__, e)

        if linking:  # after the composed snapshots, off the tasks' start
            threading.Thread(target=clean_up_logged, name="state-clean-up",
                             daemon=True).start()
        else:
            clean_up()

    def _settle(self, task: str, quietly: bool = False) -> None:
        """Wait for ``task``'s composed snapshot still being linked, if any (a commit may
        name it, a staging copy it); its failure raised unless ``quietly`` (a new build
        of the task replaces it)."""
        with self._lock:
            future = self._linking.get(task)
        if future is None:
            return
        failure = future.exception()
        if failure is not None and not quietly:
            raise failure  # the commit fails (tried again): its snapshot must be there
        with self._lock:
            if self._linking.get(task) is future:
                del self._linking[task]

    def stage(self, task: str, copies: int) -> None:
        """Link ``copies`` copies of ``task``'s newest local snapshot in the background,
        for the compositions about to start from it (``staging``: a split's children,
        while the task's last commit is under way)."""
        self._settle(task, quietly=True)
        newest = self._newest_snapshot(task, None, since_commit=False)
        if newest is not None and copies > 0:
            self._staging.stage(snapshot_dir(self.state_dir, task, str(newest)), copies)

    def _restore_own(self, task: str, marker: str | None,
                     starts: Iterable[Mapping[str, Any]] = ()) -> None:
        result: RestoreResult | None = None
        if marker is not None:
            result = restore_snapshot(self.state_dir, marker, self._blobs, self._digests)
            with self._lock:
                self._committed[task] = CheckpointId.parse(result.index.checkpoint_id)
            self._uploader.committed(result.index)
        open_live(self.state_dir, task, None if result is None else result.folder,
                  compact=False).close()
        self._drop_newer(task, None if result is None
                         else CheckpointId.parse(result.index.checkpoint_id))
        self.restores[task] = {
            "source": "empty" if result is None else result.source,
            "bytes": 0 if result is None else result.downloaded_bytes,
            "files": 0 if result is None else result.downloaded_files,
            "seconds": 0.0 if result is None else round(result.seconds, 3),
            "count": self._restored_before(task) + 1}
        if result is not None:
            # the snapshot's offsets beside the task's start: a start past them is
            # right only when no record of the task's came in between (a commit without
            # a snapshot of its own says so)
            log.info("task %s: state restored from %s (%s, %d bytes in %d files "
                     "downloaded, %.2fs); snapshot at %s, start %s", task, marker,
                     result.source, result.downloaded_bytes, result.downloaded_files,
                     result.seconds, _positions(result.index.input_offsets),
                     _positions(starts))

    def _restored_before(self, task: str) -> int:
        """How many times this processor restored ``task`` before (a task it keeps
        across versions is never restored again: this stays 1)."""
        return int(self.restores.get(task, {}).get("count", 0))

    def _restore_composed(self, task: str, checkpoint: Mapping[str, Any],
                          parts: Sequence[Mapping[str, Any]],
                          present: dict[str, RestoreResult],
                          cuttable: dict[Path, bool]) -> None:
        """A split child's or merged task's state: the entries of its key buckets from
        each source snapshot, snapshotted under a new checkpoint id that the task's first
        commit uploads (then it depends on no other task's blobs)."""
        live = claim_task_dir(self.state_dir, task) / "live"
        checkpoint_id = new_checkpoint_id()
        folder = self._composed_snapshot(task, checkpoint_id)
        def index_of(at: Path, files: Mapping[str, FileInfo]) -> None:
            self._index_composed(task, at, checkpoint_id, checkpoint, files)

        # the snapshot linked on (a split child's): only the live store is on the path
        # to the task's first batch, whose commit names a snapshot of its own
        done = compose(self.state_dir, task, parts, self._blobs, self._digests, live,
                       folder, present, cuttable, self._staging.take, index_of)
        if done.snapshot_pending is not None:
            with self._lock:
                self._linking[task] = done.snapshot_pending
        else:
            self._index_composed(task, folder, checkpoint_id, checkpoint,
                                 done.snapshot_files)
        with self._lock:
            self._committed.pop(task, None)  # the composed snapshot is newer: it goes next
        self._uploader.inherits(task, done.indexes)
        self.restores[task] = {
            "source": "composed", "bytes": done.downloaded_bytes,
            "files": done.downloaded_files, "seconds": round(done.seconds, 3),
            "from": list(done.sources), "count": self._restored_before(task) + 1,
            "linked": done.cut, "parts": list(done.parts), "copied": done.entries}
        linked = [x for x in (done.cut, *done.parts) if x]
        log.info("task %s: state composed from %s (%s; %d entries copied; %d bytes in %d "
                 "files downloaded, %.2fs)", task, ", ".join(done.sources),
                 f"{' and '.join(linked)}'s files linked and cut by key range" if linked
                 else "nothing linked", done.entries, done.downloaded_bytes,
                 done.downloaded_files, done.seconds)

    def _composed_snapshot(self, task: str, checkpoint_id: str) -> Path:
        """Where a composed store's snapshot goes (emptied: an earlier attempt's)."""
        folder = snapshot_dir(self.state_dir, task, checkpoint_id)
        shutil.rmtree(folder, ignore_errors=True)
        return folder

    def _index_composed(self, task: str, folder: Path, checkpoint_id: str,
                        checkpoint: Mapping[str, Any],
                        files: Mapping[str, FileInfo] | None = None) -> None:
        """A composed store's snapshot at ``folder`` gets a local index pairing it with
        the offsets the task starts from (how far a standby's copy is behind is measured
        from those); ``files``: its files when known (else read: a stat a file)."""
        found = inventory(folder, self._digests) if files is None else dict(files)
        index = SnapshotIndex(task, checkpoint_id, found, time.time(),
                              tuple(checkpoint.get("inputOffsets") or ()))
        index_path(folder).write_bytes(index.to_bytes())

    def sizes(self, tasks: Sequence[str]) -> dict[str, int]:
        """Bytes on disk of each task's live store (for the stats)."""
        out: dict[str, int] = {}
        for task in tasks:
            live = task_dir(self.state_dir, task) / "live"
            try:
                out[task] = sum(os.stat(path).st_size for _, path in files_in(live))
            except OSError:  # not there (yet), or replaced meanwhile
                continue
        return out

    def back_up(self, checkpoint_id: str, checkpoints: dict[str, Any]) -> dict[str, Any]:
        """``checkpoints`` (a commit body, task -> checkpoint) with, for each task that has
        a snapshot newer than its last commit and at most ``checkpoint_id``, that snapshot
        uploaded and named (``checkpointId``, ``stateCheckpointMarkers``). Raises when an
        upload fails: the commit must then not happen."""
        limit = CheckpointId.parse(checkpoint_id)
        out = dict(checkpoints)
        for task, checkpoint in checkpoints.items():
            self._settle(task)  # a composed snapshot being linked may be the newest
            newest = self._newest_snapshot(task, limit)
            if newest is None:
                continue
            result = self._uploader.upload(task, str(newest),
                                           snapshot_dir(self.state_dir, task, str(newest)),
                                           self._digests, checkpoint.get("inputOffsets", ()))
            index_path(snapshot_dir(self.state_dir, task, str(newest))).write_bytes(
                result.index_bytes)
            with self._lock:
                self._uploaded[task] = result.index
                self.uploaded[task] = result.uploaded_bytes
            log.debug("task %s: backup of %s: %d files (%d bytes) sent, %d sent ahead, %d "
                      "reused, %.3fs", task, newest, result.uploaded_files,
                      result.uploaded_bytes, result.ahead_files, result.reused_files,
                      result.seconds)
            out[task] = {**checkpoint, "checkpointId": str(newest),
                         "stateCheckpointMarkers": {MARKER_BACKEND: {STORE_NAME: result.marker}}}
        return out

    def committed(self, checkpoints: Mapping[str, Any]) -> None:
        """A commit carrying ``checkpoints`` was acknowledged: remember each task's id and
        drop its older local snapshots."""
        for task, checkpoint in checkpoints.items():
            raw = checkpoint.get("checkpointId")
            if raw is None:
                continue
            done = CheckpointId.parse(raw)
            with self._lock:
                self._committed[task] = done
                uploaded = self._uploaded.get(task)
            if uploaded is not None and uploaded.checkpoint_id == raw:
                self._uploader.committed(uploaded)
            self._drop_older(task, done)

    def _drop_newer(self, task: str, restored: CheckpointId | None) -> None:
        """Delete the task's local snapshots newer than the one its live store was just
        restored from (all of them when it starts empty). Batches whose commits never
        happened made them (a fenced or killed owner's, this process's earlier lease):
        left here, a later commit could name one, since :meth:`back_up` names a task's
        newest snapshot since its last commit (a batch in which the task opened no store
        names its previous batch's), and that state would count those batches' records
        again on top of the offsets committed (found by the exactly-once chaos test: a
        fenced worker's uncommitted snapshot named by its next lease's commit)."""
        for folder in self._snapshots(task):
            cid = _id(folder.name)
            if cid is not None and (restored is None or cid > restored):
                shutil.rmtree(folder, ignore_errors=True)
                index_path(folder).unlink(missing_ok=True)

    def _drop_older(self, task: str, keep_from: CheckpointId) -> None:
        """Delete the task's local snapshots older than ``keep_from`` (in the background:
        this runs after every commit)."""
        for folder in self._snapshots(task):
            cid = _id(folder.name)
            if cid is not None and cid < keep_from:
                index_path(folder).unlink(missing_ok=True)
                self._trash.discard(folder)

    def refresh(self, actives: Sequence[str], standbys: Sequence[str],
                read_checkpoints: Callable[[list[str]], Mapping[str, Any]],
                known: AbstractSet[str] | None = None) -> dict[str, int]:
        """Keep standby (and warm-up) copies fresh and measure every lag (KIP-441).

        ``actives``, ``standbys``: this processor's tasks in the latest job model (standbys
        by their active task's name); ``known``: the model's task names when known (a
        worker sees only its own container: then state left on disk is asked about too,
        and when the coordinator does not know one of those, only the standbys). Each
        standby copy fetches its task's newest committed snapshot incrementally (no input
        is read). Returns the state lag of every task whose state is here (active: 0;
        standby or left on disk: how many offsets its newest local snapshot is behind
        the task's latest committed checkpoint, summed over its key spaces)."""
        lags = dict.fromkeys(actives, 0)
        held = (set(standbys) | set(held_tasks(self.state_dir))) - set(actives)
        names = sorted(held if known is None else held & known)
        if not names:
            return lags
        try:
            committed = read_checkpoints(names)
        except Exception:
            if set(names) <= set(standbys):
                raise
            names = sorted(set(names) & set(standbys))  # some task left the job model
            committed = read_checkpoints(names) if names else {}
        for task in names:
            checkpoint = committed.get(task) or {}
            marker, parts = _plan(task, checkpoint)
            if task in standbys and (marker is not None or parts):
                try:
                    with self._folders.hold({task} | _source_tasks(task, checkpoint)):
                        if parts:
                            self._refresh_composed(task, checkpoint, parts)
                        else:
                            assert marker is not None
                            self._refresh_own(task, marker)
                except (OSError, KeyError, ValueError) as e:  # retried at the next round
                    log.warning("standby %s: state not fetched: %s", task, e)
            lag = self._lag(task, checkpoint)
            if lag is not None:
                lags[task] = lag
        return lags

    def collect_garbage(self, tasks: Mapping[str, Mapping[str, Any]]) -> GcPlan:
        """Delete the blob store's indexes and blobs that neither the last checkpoint of
        any task in ``tasks`` (task -> checkpoint id and markers) nor the grace period
        keeps."""
        markers = {m for checkpoint in tasks.values() if (m := state_marker(checkpoint))}
        return BlobCollector(self._blobs, self.config.gc_grace_s).collect(markers)

    def _refresh_own(self, task: str, marker: str) -> None:
        result = restore_snapshot(self.state_dir, marker, self._blobs, self._digests)
        if result.downloaded_files:
            log.info("standby %s: fetched %s (%d bytes)", task, marker,
                     result.downloaded_bytes)
        self._composed.pop(task, None)
        self._drop_older(task, CheckpointId.parse(result.index.checkpoint_id))

    def _refresh_composed(self, task: str, checkpoint: Mapping[str, Any],
                          parts: Sequence[Mapping[str, Any]]) -> None:
        """A standby of a task that has no snapshot of its own yet (just split or merged):
        built by the same rule as the active's, once per set of source snapshots, under
        the oldest possible id so the task's own first snapshot replaces it."""
        key = tuple((str(p.get("taskName")), str(p.get("checkpointId"))) for p in parts)
        if self._composed.get(task) == key:
            return
        work = claim_task_dir(self.state_dir, task) / "standby-compose"
        try:
            folder = self._composed_snapshot(task, COMPOSED_STANDBY_ID)
            done = compose(self.state_dir, task, parts, self._blobs, self._digests, work,
                           folder)
            self._index_composed(task, folder, COMPOSED_STANDBY_ID, checkpoint,
                                 done.snapshot_files)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        self._composed[task] = key
        log.info("standby %s: composed from %s (%d entries, %d bytes downloaded)", task,
                 ", ".join(done.sources), done.entries, done.downloaded_bytes)

    def _lag(self, task: str, checkpoint: Mapping[str, Any]) -> int | None:
        """How far the task's newest local snapshot is behind ``checkpoint``: offsets
        (Kafka), or milliseconds of processing (Kinesis, :func:`shard_lag`)."""
        self._settle(task, quietly=True)
        newest = self._newest_snapshot(task, None, since_commit=False)
        if newest is None:
            return None
        if str(newest) == checkpoint.get("checkpointId"):
            return 0
        index_file = index_path(snapshot_dir(self.state_dir, task, str(newest)))
        if not index_file.exists():
            return None
        index = SnapshotIndex.from_bytes(index_file.read_bytes())
        mine = key_space_offsets(index.input_offsets)
        theirs = key_space_offsets(checkpoint.get("inputOffsets") or ())
        if not mine or set(mine) != set(theirs):
            return None
        if mine == theirs:
            return 0  # nothing processed since (the same state, another snapshot id)
        if _shard_input(index.input_offsets):
            return shard_lag(index, newest, checkpoint.get("checkpointId"))
        return sum(max(0, theirs[k] - mine[k]) for k in mine)

    def _newest_snapshot(self, task: str, limit: CheckpointId | None,
                         since_commit: bool = True) -> CheckpointId | None:
        with self._lock:
            last = self._committed.get(task) if since_commit else None
        best: CheckpointId | None = None
        for folder in self._snapshots(task):
            cid = _id(folder.name)
            if cid is None or (limit is not None and cid > limit) \
                    or (last is not None and cid <= last):
                continue
            if best is None or cid > best:
                best = cid
        return best

    def _snapshots(self, task: str) -> list[Path]:
        root = task_dir(self.state_dir, task) / "snapshots"
        return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def shard_lag(index: SnapshotIndex, checkpoint_id: CheckpointId, committed: object
              ) -> int | None:
    """The lag of a copy of a task reading Kinesis shards: milliseconds of the
    active's processing it lacks, the time between its snapshot and the committed one
    (checkpoint ids are the times snapshots were taken; a composed copy's is the time it
    was composed). Kinesis sequence numbers are not counts (adjacent records' differ by
    more than 2^63), so offset differences mean nothing there; time is bounded, the same
    unit on every processor, and compared with ``--acceptable-recovery-lag`` as
    milliseconds (10000: a copy within 10 s of processing is caught up)."""
    if not isinstance(committed, str):
        return None
    try:
        theirs = CheckpointId.parse(committed).millis
    except CheckpointFormatError:
        return None
    mine = (int(index.created_at * 1000) if str(checkpoint_id) == COMPOSED_STANDBY_ID
            else checkpoint_id.millis)
    return max(0, theirs - mine)


def _shard_input(entries: Sequence[Mapping[str, Any]]) -> bool:
    """True when the key spaces are of Kinesis shards."""
    return any((e.get("ssp") or {}).get("system") == "kinesis" for e in entries)


def key_space_offsets(entries: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int, int], int]:
    """Numeric offsets by (stream, partition, key bucket); unresolved ones are left out."""
    out: dict[tuple[str, int, int], int] = {}
    for entry in entries:
        ssp, offset = entry.get("ssp") or {}, str(entry.get("offset", ""))
        if offset.isdigit():
            out[(str(ssp.get("stream")), int(ssp.get("partition", -1)),
                 int(ssp.get("keyBucket", -1)))] = int(offset)
    return out


def _id(name: str) -> CheckpointId | None:
    try:
        return CheckpointId.parse(name)
    except CheckpointFormatError:
        return None  # a .partial or .tmp folder


def _positions(offsets: Iterable[Mapping[str, Any]]) -> str:
    """``partition[.bucket]:offset`` of each SSP(Kb), for the logs."""
    out = []
    for o in offsets:
        ssp = o.get("ssp") or {}
        bucket = ssp.get("keyBucket")
        out.append(f"{ssp.get('partition')}{'' if bucket is None else f'.{bucket}'}:"
                   f"{o.get('offset')}")
    return " ".join(out) or "-"


@contextmanager
def task_state(state_dir: str | None, task: str, checkpoint_id: str | None,
               key_hash: KeyHash | None = None) -> Iterator[Callable[[], TaskStore]]:
    """A way to open ``task``'s live store for a batch's calls of ``process_task`` (one,
    or one per piece of its rows: they see each other's writes); if it was opened, the
    writes are applied and snapshotted under ``checkpoint_id`` at the end, and discarded
    on any failure (or a generator closed before its end)."""
    if state_dir is None or checkpoint_id is None:
        yield no_state
        return
    opened: list[TaskStore] = []

    def store() -> TaskStore:
        if not opened:
            opened.append(TaskStore(task_dir(Path(state_dir), task) / "live", key_hash))
        return opened[0]

    try:
        yield store
        if opened:
            opened[0].commit()
            opened[0].compact_dropped(COMPACT_BYTES_PER_BATCH)
            opened[0].snapshot(snapshot_dir(Path(state_dir), task, checkpoint_id))
    except BaseException:
        if opened:
            opened[0].discard()
        raise
    finally:
        if opened:
            opened[0].close()


def no_state() -> TaskStore:
    """What ``ctx.state`` gives a stateless worker: an error saying how to get state."""
    raise RuntimeError("this worker keeps no task state: start it with --stateful")
