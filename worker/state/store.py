"""A task's state store: RocksDB (through rocksdict) with the per-key API of
``process_task``'s ``ctx.state``.

Writes of a batch are kept aside and reach RocksDB in one atomic write batch at
:meth:`TaskStore.commit` (reads see them before that): a batch that fails leaves the store
as it was after the previous batch. Values are JSON by default; ``set_bytes`` stores raw
bytes. Each stored value carries a one-byte tag of its kind, so reads need no schema.

Entry keys follow the store's layout (``worker.state.keys``): a new store is
bucket-ordered under the job's key hash, which its first commit records; a store written
before that layout (entries, no layout entry) keeps the legacy one.
"""

from __future__ import annotations

import heapq
import json
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rocksdict import Checkpoint, Rdict, WriteBatch

from grouping.key_hash import DEFAULT_KEY_HASH, KeyHash
from worker.state import pending_cut
from worker.state.keys import (
    DROPPED_KEY,
    ENTRIES_BEGIN,
    ENTRIES_END,
    LEGACY,
    META_KEY,
    PARTS_KEY,
    BucketLayout,
    KeyRange,
    Layout,
    as_bytes,
    complement,
    intersect,
    layout_of_meta,
    ranges_of_json,
    ranges_to_json,
    subtract,
)
from worker.state.parts import Part, PartMap, free_folder
from worker.state.rocks import FILES_ON_USE, close_instance, open_instance
from worker.state.snapshot import clone

_JSON, _BYTES = b"J", b"B"
#: json.dumps with separators builds an encoder per call; one serves every value
_encode = json.JSONEncoder(separators=(",", ":")).encode
#: files under a split's deleted ranges compacted per batch (about 0.3 s here; a split
#: of 1 GB of state is compacted within ~8 of its child's batches)
COMPACT_BYTES_PER_BATCH = 64 * 1024 * 1024
RecordKey = bytes | str | None


class StateLayoutMismatch(ValueError):
    """A store's recorded key hash is not the job's: its buckets' ranges would be wrong."""


class TaskStore:
    """The state of one task on this processor: one RocksDB instance under ``path`` (its
    root) and, after a merge, the parts linked beside it (``worker.state.parts``).

    ``key_hash``: the job's (a new store is laid out by it; an existing bucket-ordered
    store must have been made with it). None: whatever the store records, and the
    default hash for a new one (tests, tools)."""

    def __init__(self, path: Path, key_hash: KeyHash | None = None, *,
                 compact: bool = True, open_files: int = FILES_ON_USE) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # automatic compactions while open, SST files kept open (rocks.open_instance)
        self._compact, self._open_files = compact, open_files
        self._db = self._open(path)
        self._pending: dict[bytes, bytes | None] = {}
        self._last_prefix: tuple[bytes | None, bytes] | None = None  # (record key, prefix)
        self._map = PartMap()
        self._part_dbs: list[Rdict] = []
        try:
            self.layout, self._recorded = self._open_layout(key_hash)
            self._open_parts()
            self._apply_pending_cut()
            self._apply_pending_parts()
        except BaseException:
            self.close()
            raise

    def _open(self, path: Path) -> Rdict:
        return open_instance(path, compact=self._compact, open_files=self._open_files)

    def _apply_pending_cut(self) -> None:
        """A composed store's cut, recorded beside its files (``worker.state.pending_cut``):
        applied now, before anything reads the store."""
        kept = pending_cut.pending(self.path)
        if kept is None:
            return
        if not self.bucket_ordered:
            raise StateLayoutMismatch(
                f"the state at {self.path} records a cut by key range, but its layout "
                f"({self.layout}) has no key ranges")
        self.cut(kept)
        pending_cut.applied(self.path)

    def _apply_pending_parts(self) -> None:
        """A merged store's parts, recorded beside its root's files
        (``pending_cut.record_parts``; the root's own cut is applied first, so that the
        root keeps none of the parts' ranges): opened, cut to their ranges by range
        deletions, and named in the root's map. Applied again after a crash before the
        record is removed: the same map, and deletions that delete nothing more."""
        recorded = pending_cut.pending_parts(self.path)
        if recorded is None:
            return
        if not self.bucket_ordered:
            raise StateLayoutMismatch(
                f"the state at {self.path} records parts by key range, but its layout "
                f"({self.layout}) has no key ranges")
        have = {p.folder for p in self._map.parts}
        added: list[tuple[Part, Rdict]] = []
        try:
            for part in recorded:
                if part.folder in have:
                    continue
                db = self._open(self.path / part.folder)
                added.append((part, db))
                meta = db.get(META_KEY)
                if meta is None or layout_of_meta(bytes(meta)) != self.layout or \
                        db.get(PARTS_KEY) is not None:
                    raise StateLayoutMismatch(
                        f"part {part.folder} of the state at {self.path} is not a store "
                        f"of one instance laid out like its root ({self.layout})")
        except BaseException:
            for _, db in added:
                close_instance(db)
            raise
        if added:
            self._set_parts([*zip(self._map.parts, self._part_dbs, strict=True), *added])
        named = {p.folder for p in recorded}
        for i, part in enumerate(self._map.parts):
            if part.folder in named:
                self._drop_ranges(i, complement(list(part.ranges)))
                pending_cut.applied(self.path / part.folder)
        pending_cut.parts_applied(self.path)

    def _open_layout(self, key_hash: KeyHash | None) -> tuple[Layout, bool]:
        """(the layout, whether the store records it)."""
        raw = self._db.get(META_KEY)
        if raw is not None:
            layout = layout_of_meta(bytes(raw))
            if key_hash is not None and layout.key_hash != key_hash:
                raise StateLayoutMismatch(
                    f"the state at {self.path} is ordered by key hash "
                    f"{layout.key_hash.value}, the job's is {key_hash.value}")
            return layout, True
        if any(True for _ in _range(self._db, b"", None)):
            return LEGACY, True  # entries written before layouts were recorded
        return BucketLayout(key_hash or DEFAULT_KEY_HASH), False

    def _open_parts(self) -> None:
        raw = self._db.get(PARTS_KEY)
        self._map = PartMap.of_json(None if raw is None else bytes(raw))
        for part in self._map.parts:
            db = self._open(self.path / part.folder)
            self._part_dbs.append(db)
            meta = db.get(META_KEY)
            if meta is None or layout_of_meta(bytes(meta)) != self.layout:
                raise StateLayoutMismatch(
                    f"part {part.folder} of the state at {self.path} is not laid out "
                    f"like its root ({self.layout})")

    @property
    def bucket_ordered(self) -> bool:
        """Whether a key bucket is one key range here (the layout a split can cut)."""
        return isinstance(self.layout, BucketLayout)

    @property
    def parts(self) -> int:
        """How many RocksDB instances hold the state (1: the root alone)."""
        return 1 + len(self._part_dbs)

    # -- the per-key API

    def get(self, key: RecordKey, name: str, default: Any = None) -> Any:
        """Entry ``name`` of record ``key`` (JSON value), or ``default``."""
        raw = self._read(self._entry_key(key, name))
        if raw is None:
            return default
        return _decode(raw)

    def get_bytes(self, key: RecordKey, name: str) -> bytes | None:
        """Entry ``name`` of record ``key`` as stored with :meth:`set_bytes`, or None."""
        raw = self._read(self._entry_key(key, name))
        if raw is None:
            return None
        if raw[:1] != _BYTES:
            raise TypeError(f"entry {name!r} holds JSON, not bytes")
        return raw[1:]

    def set(self, key: RecordKey, name: str, value: Any) -> None:
        """Set entry ``name`` of record ``key`` to a JSON-serializable ``value``."""
        self._pending[self._entry_key(key, name)] = _JSON + _encode(value).encode()

    def set_bytes(self, key: RecordKey, name: str, value: bytes) -> None:
        """Set entry ``name`` of record ``key`` to raw bytes."""
        self._pending[self._entry_key(key, name)] = _BYTES + bytes(value)

    def delete(self, key: RecordKey, name: str) -> None:
        """Remove entry ``name`` of record ``key`` (nothing if absent)."""
        self._pending[self._entry_key(key, name)] = None

    def _entry_key(self, key: RecordKey, name: str) -> bytes:
        """The stored key of entry ``name`` of ``key``. The last key's prefix is kept: an
        app reads a key's entry, then writes it, and a prefix costs a hash."""
        record_key = as_bytes(key)
        last = self._last_prefix
        if last is None or last[0] != record_key:
            last = self._last_prefix = (record_key, self.layout.prefix(record_key))
        return last[1] + name.encode()

    def items(self, key: RecordKey) -> dict[str, Any]:
        """Every entry of record ``key``, by name (bytes entries as bytes)."""
        head = self.layout.prefix(as_bytes(key))
        # a record's entries share its bucket's range: one instance holds them all
        found = {stored: raw for stored, raw in _prefixed(self._instance_of(head), head)}
        for stored, raw in self._pending.items():
            if stored.startswith(head) and self.layout.split(stored)[0] == as_bytes(key):
                if raw is None:
                    found.pop(stored, None)
                else:
                    found[stored] = raw
        return {self.layout.split(stored)[1]: _decode(raw)
                for stored, raw in sorted(found.items())}

    # -- batches, snapshots

    def commit(self) -> int:
        """Apply the batch's writes and flush them to SST files (a snapshot then needs no
        WAL replay); returns how many entries changed. Atomic in each instance: a store
        of several parts may be left half-written by a crash, which does not matter,
        since a live store is only ever opened after it was rebuilt from a committed
        snapshot (``restore.open_live``), never as a crash left it."""
        written = self._apply(self._pending.items())
        changed = len(self._pending)
        self._pending.clear()
        self._db.flush()
        for i in written - {-1}:
            self._part_dbs[i].flush()
        return changed

    def discard(self) -> None:
        """Forget the running batch's writes (it failed and will be processed again)."""
        self._pending.clear()

    def snapshot(self, target: Path) -> Path:
        """A consistent copy of the committed state at ``target`` (hard links to the SST
        files, copies of the small ones): RocksDB's checkpoint of each instance, the
        parts' in their folders inside the root's, built aside and renamed into place."""
        if self._pending:
            raise RuntimeError("commit or discard the batch before taking a snapshot")
        target.parent.mkdir(parents=True, exist_ok=True)
        if not self._part_dbs:
            Checkpoint(self._db).create_checkpoint(str(target))
            return target
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        Checkpoint(self._db).create_checkpoint(str(staging))
        for part, db in zip(self._map.parts, self._part_dbs, strict=True):
            Checkpoint(db).create_checkpoint(str(staging / part.folder))
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        return target

    def ingest(self, entries: Sequence[tuple[bytes, bytes]]) -> int:
        """Write stored (key, value) pairs as they are (another store's entries, when a
        split or merge composes state); returns how many."""
        if self._pending:
            raise RuntimeError("commit or discard the batch before ingesting")
        self._apply(entries)
        return len(entries)

    def delete_ranges(self, ranges: Sequence[KeyRange]) -> None:
        """Remove every committed entry in ``ranges`` with RocksDB's range deletions
        (tombstones: no entry is read), atomically in each instance. The files under them
        are compacted later, a bounded slice per batch (:meth:`compact_dropped`)."""
        if self._pending:
            raise RuntimeError("commit or discard the batch before deleting ranges")
        for i in range(-1, len(self._part_dbs)):
            self._drop_ranges(i, ranges)

    def _drop_ranges(self, i: int, ranges: Sequence[KeyRange]) -> None:
        if not ranges:
            return
        db = self._instance(i)
        batch = WriteBatch(raw_mode=True)
        for r in ranges:
            batch.delete_range(r.begin, r.end)
        # the first batch after the cut skips compaction: its backup is what a split's
        # first output waits for, and sends only what the cut wrote
        batch.put(DROPPED_KEY, ranges_to_json([*_dropped(db), *ranges], wait=1))
        self._write(i, batch)

    def cut(self, kept: Sequence[KeyRange]) -> None:
        """Keep only the entries in ``kept`` (sorted, disjoint): range deletions of the
        rest in every instance, and the parts left owning nothing closed and removed."""
        if self._pending:
            raise RuntimeError("commit or discard the batch before cutting")
        pairs, gone = [], []
        for part, db in zip(self._map.parts, self._part_dbs, strict=True):
            ranges = intersect(part.ranges, kept)
            if ranges:
                pairs.append((Part(part.folder, tuple(ranges)), db))
            else:
                gone.append((part.folder, db))
        if tuple(p for p, _ in pairs) != self._map.parts:
            self._set_parts(pairs)
            for folder, db in gone:
                db.close()
                shutil.rmtree(self.path / folder, ignore_errors=True)
        self.delete_ranges(complement(list(kept)))

    def adopt(self, source: Path, kept: Sequence[KeyRange]) -> bool:
        """Link another task's snapshot at ``source`` as parts of this store owning its
        ``kept`` ranges (sorted, disjoint, and holding none of this store's entries: a
        merge's other child), cut to them by range deletions: no entry is read or
        written. False (nothing changed) when the source is not laid out as this store
        (a legacy one, another key hash): its entries must then be copied."""
        if self._pending:
            raise RuntimeError("commit or discard the batch before adopting a store")
        if not self.bucket_ordered or not kept or \
                pending_cut.pending_parts(source) is not None:
            return False  # (one with parts still recorded is opened to be copied)
        taken = {p.folder for p in self._map.parts}
        home = self.path / free_folder(taken)
        clone(source, home, nested=False)
        # a source whose own cut is still recorded (a child that wrote nothing since its
        # split) keeps only what both cuts keep
        recorded = pending_cut.pending(home)
        if recorded is not None:
            kept = intersect(kept, recorded)
            pending_cut.applied(home)
        root = self._open(home)
        meta = root.get(META_KEY)
        if meta is None or layout_of_meta(bytes(meta)) != self.layout:
            root.close()
            shutil.rmtree(home, ignore_errors=True)
            return False
        taken.add(home.name)
        raw = root.get(PARTS_KEY)
        nested = PartMap.of_json(None if raw is None else bytes(raw))
        root.delete(PARTS_KEY)  # a part of this store now, not a store of parts
        gone = complement(list(kept))
        added: list[tuple[Part, Rdict]] = []
        for part in nested.parts:
            ranges = intersect(part.ranges, kept)
            if not ranges:
                continue
            folder = free_folder(taken)
            taken.add(folder)
            clone(source / part.folder, self.path / folder)
            added.append((Part(folder, tuple(ranges)),
                          self._open(self.path / folder)))
        own = subtract(kept, nested.owned())
        if own:
            added.append((Part(home.name, tuple(own)), root))
        else:
            root.close()
            shutil.rmtree(home, ignore_errors=True)
        at = len(self._part_dbs)
        self._set_parts([*zip(self._map.parts, self._part_dbs, strict=True), *added])
        for i in range(at, len(self._part_dbs)):
            self._drop_ranges(i, gone)
        return True

    def _set_parts(self, pairs: Sequence[tuple[Part, Rdict]]) -> None:
        """Make ``pairs`` the store's parts, recorded in the root."""
        parts = PartMap([p for p, _ in pairs])
        batch = WriteBatch(raw_mode=True)
        if parts.parts:
            batch.put(PARTS_KEY, parts.to_json())
        else:
            batch.delete(PARTS_KEY)
        self._write(-1, batch)  # flushed with the composition (one L0 file, not two)
        self._map, self._part_dbs = parts, [db for _, db in pairs]

    def compact_dropped(self, budget_bytes: int) -> int:
        """Compact about ``budget_bytes`` of the files under ranges a split deleted (the
        first overlapping files, in key order; at least one file), so that their data
        leaves the disk and the next snapshots; returns the bytes of files compacted.
        A split's pause stays flat, and the space its cut leaves behind (a child's
        snapshot still names its parent's whole files) goes within a few batches,
        each paying a bounded share. A crash before the ranges' record is updated
        compacts the slice again: nothing is left to drop, so it costs little."""
        if self._pending:
            raise RuntimeError("commit or discard the batch before compacting")
        taken = 0
        for db in (self._db, *self._part_dbs):
            if taken >= budget_bytes > 0:
                break
            taken += _compact_dropped(db, max(1, budget_bytes - taken))
        return taken

    def remove(self, stored: Sequence[bytes]) -> int:
        """Delete committed entries by stored key (a reshard's filter), atomically in each
        instance."""
        if self._pending:
            raise RuntimeError("commit or discard the batch before removing entries")
        self._apply((key, None) for key in stored)
        return len(stored)

    def entries(self, within: KeyRange | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Every committed (stored key, stored value), in key order (in ``within``)."""
        if within is None:
            if self.layout is LEGACY:
                begin, end = b"", None
            else:
                begin, end = ENTRIES_BEGIN, ENTRIES_END  # (not META_KEY)
        else:
            begin, end = within.begin, within.end
        if not self._part_dbs:
            yield from _range(self._db, begin, end)
            return
        # the instances own disjoint keys: their ordered streams merge into one
        yield from heapq.merge(*(_range(db, begin, end)
                                 for db in (self._db, *self._part_dbs)),
                               key=lambda entry: entry[0])

    def split_key(self, stored: bytes) -> tuple[bytes | None, str]:
        """(record key, entry name) of one of :meth:`entries`' keys."""
        return self.layout.split(stored)

    def close(self) -> None:
        """Close RocksDB (its lock is released: another process may open the store), once
        the compactions it runs are done (``rocks.close_instance``: their work is kept)."""
        try:
            for db in self._part_dbs:
                close_instance(db)
        finally:
            close_instance(self._db)

    def __enter__(self) -> TaskStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- helpers

    def _instance(self, i: int) -> Rdict:
        return self._db if i < 0 else self._part_dbs[i]

    def _instance_of(self, stored: bytes) -> Rdict:
        return self._instance(self._map.owner(stored)) if self._part_dbs else self._db

    def _read(self, stored: bytes) -> bytes | None:
        if stored in self._pending:
            return self._pending[stored]
        raw = self._instance_of(stored).get(stored)
        return None if raw is None else bytes(raw)

    def _apply(self, writes: Iterable[tuple[bytes, bytes | None]]) -> frozenset[int]:
        """Put (value) or delete (None) stored keys, one write batch per instance;
        returns the instances written (-1: the root)."""
        batches: dict[int, WriteBatch] = {}
        owner = self._map.owner if self._part_dbs else None
        for stored, raw in writes:
            i = -1 if owner is None else owner(stored)
            batch = batches.get(i)
            if batch is None:
                batch = batches[i] = WriteBatch(raw_mode=True)
            if raw is None:
                batch.delete(stored)
            else:
                batch.put(stored, raw)
        for i, batch in batches.items():
            self._write(i, batch)
        return frozenset(batches)

    def _write(self, i: int, batch: WriteBatch) -> None:
        """Apply ``batch`` to instance ``i``; a new store's first write records its
        layout in it (atomic: a store with entries always names its layout)."""
        if i < 0 and not self._recorded and isinstance(self.layout, BucketLayout):
            batch.put(META_KEY, self.layout.meta())
            self._recorded = True
        self._instance(i).write(batch)


def _dropped(db: Rdict) -> list[KeyRange]:
    raw = db.get(DROPPED_KEY)
    return [] if raw is None else ranges_of_json(bytes(raw))[0]


def _compact_dropped(db: Rdict, budget_bytes: int) -> int:
    """:meth:`TaskStore.compact_dropped` in one instance."""
    raw = db.get(DROPPED_KEY)
    if raw is None:
        return 0
    dropped, wait = ranges_of_json(bytes(raw))
    if not dropped:
        db.delete(DROPPED_KEY)
        return 0
    if wait > 0:
        db.put(DROPPED_KEY, ranges_to_json(dropped, wait - 1))
        db.flush()
        return 0
    first = dropped[0]
    files = sorted((f for f in db.live_files()
                    if bytes(f["start_key"]) < first.end
                    and bytes(f["end_key"]) >= first.begin),
                   key=lambda f: bytes(f["start_key"]))
    taken = 0
    end = first.end
    for i, f in enumerate(files):
        taken += int(f["size"])
        if taken >= budget_bytes and i + 1 < len(files):
            # up to the next file's start (files of several levels overlap: never a
            # slice that ends before it begins)
            end = min(first.end, bytes(files[i + 1]["start_key"]))
            if end <= first.begin:
                end = first.end
            break
    if files:
        db.compact_range(first.begin, end)
    left = [KeyRange(end, first.end)] if first.begin < end < first.end else []
    batch = WriteBatch(raw_mode=True)
    rest = [*left, *dropped[1:]]
    if rest:
        batch.put(DROPPED_KEY, ranges_to_json(rest))
    else:
        batch.delete(DROPPED_KEY)
    db.write(batch)
    db.flush()
    return taken


def _prefixed(db: Rdict, head: bytes) -> Iterator[tuple[bytes, bytes]]:
    it = db.iter()
    it.seek(head)
    while it.valid():
        stored = bytes(it.key())
        if not stored.startswith(head):
            return
        yield stored, bytes(it.value())
        it.next()


def _range(db: Rdict, begin: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    it = db.iter()
    it.seek(begin)
    while it.valid():
        stored = bytes(it.key())
        if end is not None and stored >= end:
            return
        yield stored, bytes(it.value())
        it.next()


def _decode(raw: bytes) -> Any:
    kind, body = raw[:1], raw[1:]
    if kind == _JSON:
        return json.loads(body)
    if kind == _BYTES:
        return body
    raise ValueError(f"unknown value kind {kind!r}")
