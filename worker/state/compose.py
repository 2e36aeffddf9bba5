"""A task's state composed from other tasks' snapshots, filtered by key bucket (and, for a
Kinesis child shard, by the hash-key range of the child): what a split child or a merged
task starts from (``checkpoint.state_sources`` says which).

Each source snapshot is made present locally (``restore_snapshot``: local files first,
then downloads). The first source whose store is bucket-ordered by the job's key hash
(``worker.state.keys``) becomes the new store itself: hard-linked (RocksDB's files are
immutable) and cut to the task's key ranges by range deletions, so a split costs the same
at 10 MB or 10 GB. Every other bucket-ordered source whose kept ranges no other
source shares (a factor merge's second child) is linked the same way beside it, as a
part of the new store owning those ranges (``worker.state.parts``): a merge copies no
entry either. When every source is such a store of one instance (a factor split's
child, a factor merge's task), none is even opened: the ranges the root keeps, and the
parts, are recorded beside the linked files and applied when the store is first opened
(``pending_cut``), which the task's first batch does anyway, and the links may have been
made ahead (``staging``). The rest are copied aside, opened, and their entries in the task's key
buckets written into the new store: for a bucket-ordered source (a Kinesis merge's
parents, which share key buckets) only its kept ranges are read; a legacy store
(written before the layout) is read whole and its entries are rewritten in the
bucket-ordered layout, which converts it once. Null-key
entries come only from the source flagged for them. A Kinesis child shard's hash-key
range is not a key range of the layout: that filter reads the kept entries (a reshard
stays linear in the state it keeps). The sources' key sets are disjoint by construction,
so the order of writes does not matter. The caller snapshots the result under a new
checkpoint id, and the task's first commit uploads that snapshot: from then on it
depends on no other task's blobs.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grouping.key_bucket import key_bucket
from grouping.key_hash import DEFAULT_KEY_HASH, KeyHash, key_hash_of
from grouping.shards import hash_key
from worker.state import pending_cut
from worker.state.backup import SnapshotIndex, state_marker
from worker.state.blobs import BlobStore
from worker.state.keys import (
    META_KEY,
    PARTS_KEY,
    BucketLayout,
    KeyRange,
    intersect,
    kept_ranges,
    layout_of_meta,
)
from worker.state.parts import PART_PREFIX, Part
from worker.state.restore import RestoreResult, restore_snapshot
from worker.state.rocks import FEW_FILES, open_read_only
from worker.state.snapshot import Digests, FileInfo, clone, task_dir
from worker.state.store import TaskStore

BATCH = 10_000  # entries per RocksDB write batch


@dataclass(frozen=True, slots=True)
class Composed:
    """What a composition cost and moved."""

    sources: tuple[str, ...]  # the source tasks
    entries: int
    downloaded_files: int
    downloaded_bytes: int
    seconds: float
    cut: str | None = None  # the source linked and cut by ranges (no entry copied)
    # the sources' snapshot indexes (their blobs are the composed task's to reuse)
    indexes: tuple[SnapshotIndex, ...] = ()
    # the other sources linked as parts of the new store (a merge: no entry copied)
    parts: tuple[str, ...] = ()
    # the files of the snapshot made, when known without reading it (a split child's:
    # its source's, and the recorded cut)
    snapshot_files: Mapping[str, FileInfo] | None = None
    # the snapshot still being linked (``compose``'s ``snapshot_done``): done, or failed
    snapshot_pending: Future[None] | None = None


def is_own_whole(task: str, sources: Sequence[Mapping[str, Any]]) -> bool:
    """One source, the task itself: its own snapshot holds all of its state."""
    return len(sources) == 1 and sources[0].get("taskName") == task


@dataclass(frozen=True, slots=True)
class _Keep:
    """What a task keeps of one ``stateSources`` entry: its key buckets under the
    source's factor (null keys: when ``nullKeys``) and, for a parent shard's snapshot,
    the record keys whose Kinesis hash key is in the child's range."""

    factor: int
    buckets: frozenset[int]
    null_keys: bool
    hash_keys: tuple[int, int] | None

    @staticmethod
    def of(source: Mapping[str, Any]) -> _Keep:
        within = source.get("hashKeyRange")
        return _Keep(int(source["elasticityFactor"]),
                     frozenset(int(b) for b in source["keyBuckets"]),
                     bool(source.get("nullKeys")),
                     (int(within[0]), int(within[1])) if within else None)

    def ranges(self) -> list[KeyRange]:
        """The bucket-ordered key ranges kept."""
        return kept_ranges(self.buckets, self.factor, self.null_keys)

    def in_hash_range(self, key: bytes | None) -> bool:
        if self.hash_keys is None or key is None:
            return True
        return self.hash_keys[0] <= hash_key(key) <= self.hash_keys[1]

    def keeps(self, key: bytes | None, key_hash: KeyHash) -> bool:
        if key is None:
            return self.null_keys
        return key_bucket(key, 0, self.factor, key_hash) in self.buckets and \
            self.in_hash_range(key)


def compose(state_dir: Path, task: str, sources: Sequence[Mapping[str, Any]],
            blobs: BlobStore, digests: Digests, into: Path,
            snapshot: Path | None = None,
            present: dict[str, RestoreResult] | None = None,
            cuttable: dict[Path, bool] | None = None,
            staged: Callable[[Path], Path | None] | None = None,
            snapshot_done: Callable[[Path, Mapping[str, FileInfo]], None] | None = None
            ) -> Composed:
    """Build a fresh store at ``into`` holding, from each source snapshot, the entries of
    its key buckets (API ``stateSources``), and snapshot it at ``snapshot`` if given.
    ``present``: the source snapshots already made present, by marker (a split's
    children share their parent's: it is checked and indexed once, not once a child);
    the ones this call restores are added to it. ``cuttable``: what is known of the
    source folders (bucket-ordered by the job's hash, one instance), likewise shared.

    A task built from one such source alone (a factor split's child) is its files
    hard-linked with the ranges it keeps recorded beside them (``pending_cut``), in the
    live store and the snapshot: no RocksDB instance is opened here at all; ``staged``
    gives copies of a source folder linked ahead, when there are (``staging``). With
    ``snapshot_done``, such a task's snapshot is linked after this returns, on a thread
    of its own, and ``snapshot_done(snapshot, its files)`` called once it is in place
    (``Composed.snapshot_pending`` says when): only the live store is on the path to
    the task's first batch, which takes a snapshot of its own.

    The stores opened here compact nothing (``rocks.open_instance``): the cut's range
    deletions and the linked files' owed compactions are left to the task's first batch,
    which would otherwise wait for them here, before its output starts."""
    started = time.perf_counter()
    shutil.rmtree(into, ignore_errors=True)
    files = size = written = 0
    key_hash = key_hash_of(sources[0]) if sources else DEFAULT_KEY_HASH  # the job's
    restored: list[tuple[int, Path, _Keep]] = []
    indexes: list[SnapshotIndex] = []
    made_present: list[RestoreResult] = []
    for i, source in enumerate(sources):
        marker = state_marker(source)
        if marker is None:
            continue
        done = None if present is None else present.get(marker)
        if done is None or not done.folder.is_dir():  # (snapshots are immutable)
            # a merge's sources were split from one parent: their shared files come once
            done = restore_snapshot(state_dir, marker, blobs, digests,
                                    neighbours=[x.task_name for x in indexes])
            files += done.downloaded_files
            size += done.downloaded_bytes
            if present is not None:
                present[marker] = done
        restored.append((i, done.folder, _Keep.of(source)))
        indexes.append(done.index)
        made_present.append(done)
    links = _linkable(restored, key_hash, {} if cuttable is None else cuttable)
    if links is not None:
        # a copy staged before the folder was rebuilt from the blob store (it did not
        # match its index) may hold what the index does not: used only if nothing came
        fresh = all(r.downloaded_files == 0 for r in made_present)
        folders = [f"{PART_PREFIX}{n}" for n in range(1, len(links))]

        def made(at: Path) -> dict[str, FileInfo]:
            out: dict[str, FileInfo] = {}
            for (j, _, _), inside in zip(links, ["", *folders], strict=True):
                prefix = f"{inside}/" if inside else ""
                out.update((prefix + n, f) for n, f in indexes[j].files.items()
                           if n not in _RECORDS)
            out[pending_cut.CUT_FILE] = digests.of(at / pending_cut.CUT_FILE)
            if folders:
                out[pending_cut.PARTS_FILE] = digests.of(at / pending_cut.PARTS_FILE)
            return out

        pending = _link_and_record(
            [(folder, kept) for _, folder, kept in links], into, snapshot,
            staged if fresh else None,
            None if snapshot_done is None or snapshot is None
            else lambda at: snapshot_done(at, made(at)))
        names = [str(sources[restored[j][0]].get("taskName")) for j, _, _ in links]
        return Composed(tuple(str(s.get("taskName")) for s in sources), 0, files, size,
                        time.perf_counter() - started, names[0], tuple(indexes),
                        tuple(names[1:]),
                        snapshot_files=None if snapshot is None or pending is not None
                        else made(snapshot),
                        snapshot_pending=pending)
    target, cut = _cut_base(restored, into, key_hash)
    linked: list[str] = []
    try:
        for i, folder, keep in restored:
            if i == cut:
                continue
            if _apart(keep, [k for j, _, k in restored if j != i]) and \
                    target.adopt(folder, keep.ranges()):
                linked.append(str(sources[i].get("taskName")))
                continue
            aside = task_dir(state_dir, task) / f"compose-{i}"
            clone(folder, aside)
            try:
                with TaskStore(aside, compact=False) as store:
                    written += _copy(store, target, keep, key_hash)
            finally:
                shutil.rmtree(aside, ignore_errors=True)
        target.commit()
        if snapshot is not None:
            target.snapshot(snapshot)
    finally:
        target.close()
    return Composed(tuple(str(s.get("taskName")) for s in sources), written, files, size,
                    time.perf_counter() - started,
                    None if cut is None else str(sources[cut].get("taskName")),
                    tuple(indexes), tuple(linked))


def _cuttable(folder: Path, key_hash: KeyHash, known: dict[Path, bool]) -> bool:
    """Whether the store at ``folder`` can be cut by key ranges without opening it for
    writing: bucket-ordered by the job's hash, and one instance (a store of parts is cut
    part by part when opened, ``TaskStore.cut``). Read once per folder."""
    found = known.get(folder)
    if found is None:
        db = open_read_only(folder, FEW_FILES)
        try:
            meta, parts = db.get(META_KEY), db.get(PARTS_KEY)
        finally:
            db.close()
        found = known[folder] = meta is not None and parts is None and \
            layout_of_meta(bytes(meta)) == BucketLayout(key_hash) and \
            pending_cut.pending_parts(folder) is None
    return found


def _linkable(restored: Sequence[tuple[int, Path, _Keep]], key_hash: KeyHash,
              cuttable: dict[Path, bool]) -> list[tuple[int, Path, list[KeyRange]]] | None:
    """The sources a task is composed of by links alone, each with the ranges it keeps
    (and its own recorded cut keeps), the first to be the new store's root and the
    others its parts; None when it cannot be: some source is not cuttable unopened
    (``_cuttable``), filters by hash key (a Kinesis reshard), or shares ranges with
    another (a Kinesis merge's parents)."""
    if not restored or any(k.hash_keys is not None or not _cuttable(f, key_hash, cuttable)
                           for _, f, k in restored):
        return None
    if len(restored) > 1 and not all(
            _apart(k, [o for j, _, o in restored if j != i]) for i, _, k in restored):
        return None
    out = []
    for j, (_, folder, keep) in enumerate(restored):
        kept = keep.ranges()
        before = pending_cut.pending(folder)
        if before is not None:
            kept = intersect(kept, before)
        if kept or len(restored) == 1:
            out.append((j, folder, kept))
    return out or None


#: the files a composition records beside a store (never a source's to link)
_RECORDS = frozenset({pending_cut.CUT_FILE, pending_cut.PARTS_FILE})


def _link_and_record(links: Sequence[tuple[Path, Sequence[KeyRange]]], into: Path,
                     snapshot: Path | None,
                     staged: Callable[[Path], Path | None] | None,
                     snapshot_done: Callable[[Path], None] | None = None
                     ) -> Future[None] | None:
    """The first source's files linked at ``into`` (and ``snapshot``) as a store keeping
    its ranges only, once opened, and each other source's in a part folder inside it,
    recorded as the part owning its ranges (``pending_cut``): a split child is one
    source, a factor merge's task one per child. A copy of a source staged ahead is used
    as it is (renamed into place). Each copy is built aside and renamed into place whole.
    With ``snapshot_done``, the snapshot is left to a thread of its own, which calls it
    once the snapshot is in place: the future returned says when (or why not)."""
    folders = [f"{PART_PREFIX}{n}" for n in range(1, len(links))]
    parts = [Part(name, tuple(kept)) for name, (_, kept) in zip(folders, links[1:],
                                                                  strict=True)]

    def place(target: Path, staged: Callable[[Path], Path | None] | None = staged) -> None:
        build = target.with_name(target.name + ".linking.partial")
        shutil.rmtree(build, ignore_errors=True)
        for (source, _), inside in zip(links, ["", *folders], strict=True):
            at = build / inside if inside else build
            copy = None if staged is None else staged(source)
            if copy is None:
                clone(source, at)
            else:
                at.parent.mkdir(parents=True, exist_ok=True)
                copy.rename(at)
            for record in _RECORDS:  # the source's own: superseded by this one's
                (at / record).unlink(missing_ok=True)
        pending_cut.record(build, links[0][1])
        if parts:
            pending_cut.record_parts(build, parts)
        shutil.rmtree(target, ignore_errors=True)
        build.rename(target)

    if snapshot is None:
        place(into)
        return None
    # the two copies side by side: a copy is ~1 000 hard links at 4 GB, and a link
    # waits in the kernel, not for the interpreter
    done: Future[None] = Future()
    target = snapshot

    def snapshot_copy() -> None:
        try:
            # linked after the task starts: the copies staged ahead are the live stores'
            place(target, None if snapshot_done is not None else staged)
            if snapshot_done is not None:
                snapshot_done(target)
        except BaseException as e:  # the caller's, or whoever waits for the future
            done.set_exception(e)
        else:
            done.set_result(None)

    beside = threading.Thread(target=snapshot_copy, name="compose-link", daemon=True)
    beside.start()
    if snapshot_done is not None:
        try:
            place(into)
        except BaseException:
            # its snapshot, whole (indexed) or not made at all, is an orphan: an
            # older id than the next attempt's
            beside.join()
            raise
        return done
    try:
        place(into)
    finally:
        beside.join()
    done.result()
    return None


def _apart(keep: _Keep, others: Sequence[_Keep]) -> bool:
    """Whether a source's kept entries can be linked as a part of the new store: whole
    key ranges (no hash-key filter), which no other source's overlap (a factor merge's
    children; not a Kinesis merge's parents, which share key buckets)."""
    if keep.hash_keys is not None:
        return False
    mine = keep.ranges()
    return all(not intersect(mine, other.ranges()) for other in others)


def _cut_base(restored: Sequence[tuple[int, Path, _Keep]], into: Path, key_hash: KeyHash
              ) -> tuple[TaskStore, int | None]:
    """The new store: the first bucket-ordered source (by the job's hash) hard-linked at
    ``into`` and cut to its kept ranges (and its index), else an empty one."""
    wanted = BucketLayout(key_hash)
    for i, folder, keep in restored:
        clone(folder, into)
        store = TaskStore(into, compact=False, open_files=FEW_FILES)  # cut, not read
        if store.layout == wanted:
            store.cut(keep.ranges())
            if keep.hash_keys is not None:
                _drop_outside_hash_range(store, keep)
            return store, i
        store.close()  # legacy (or another hash): rewritten entry by entry, like the rest
        shutil.rmtree(into)
    return TaskStore(into, key_hash, compact=False, open_files=FEW_FILES), None


def _drop_outside_hash_range(store: TaskStore, keep: _Keep) -> None:
    """A Kinesis child's filter: its parent's entries whose hash key the child's range
    leaves out (read entry by entry: MD5 ranges are not the layout's)."""
    for r in keep.ranges():
        doomed: list[bytes] = []
        for stored, _ in store.entries(r):
            if not keep.in_hash_range(store.split_key(stored)[0]):
                doomed.append(stored)
            if len(doomed) >= BATCH:
                store.remove(doomed)
                doomed = []
        store.remove(doomed)


def _copy(source: TaskStore, target: TaskStore, keep: _Keep, key_hash: KeyHash) -> int:
    """Write ``source``'s kept entries into ``target``; how many. A bucket-ordered source
    by the same hash is read only in its kept ranges and copied as stored; any other is
    read whole, and its entries re-keyed in ``target``'s layout."""
    same = source.layout == target.layout
    found = (e for r in keep.ranges() for e in source.entries(r)) if same \
        else source.entries()
    written = 0
    pending: list[tuple[bytes, bytes]] = []
    for stored, raw in found:
        key, name = source.split_key(stored)
        if not (keep.in_hash_range(key) if same else keep.keeps(key, key_hash)):
            continue
        pending.append((stored if same else target.layout.entry_key(key, name), raw))
        if len(pending) >= BATCH:
            written += target.ingest(pending)
            pending = []
    return written + target.ingest(pending)
