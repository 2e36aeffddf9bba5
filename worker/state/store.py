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

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rocksdict import BlockBasedOptions, Checkpoint, Options, Rdict, WriteBatch

from grouping.key_hash import DEFAULT_KEY_HASH, KeyHash
from worker.state.keys import (
    DROPPED_KEY,
    ENTRIES_BEGIN,
    ENTRIES_END,
    LEGACY,
    META_KEY,
    BucketLayout,
    KeyRange,
    Layout,
    as_bytes,
    layout_of_meta,
    ranges_of_json,
    ranges_to_json,
)

_JSON, _BYTES = b"J", b"B"
#: files under a split's deleted ranges compacted per batch (about 0.3 s here; a split
#: of 1 GB of state is compacted within ~8 of its child's batches)
COMPACT_BYTES_PER_BATCH = 64 * 1024 * 1024
RecordKey = bytes | str | None


def _options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    # every batch's commit flushes a small SST file, and in the bucket-ordered layout
    # each spans the whole key space: a read would look into every one of them. A bloom
    # filter per file (10 bits a key: ~1% false positives) lets a read skip the files
    # that cannot hold its key
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    options.set_block_based_table_factory(table)
    return options


class StateLayoutMismatch(ValueError):
    """A store's recorded key hash is not the job's: its buckets' ranges would be wrong."""


class TaskStore:
    """The state of one task on this processor (one RocksDB instance under ``path``).

    ``key_hash``: the job's (a new store is laid out by it; an existing bucket-ordered
    store must have been made with it). None: whatever the store records, and the
    default hash for a new one (tests, tools)."""

    def __init__(self, path: Path, key_hash: KeyHash | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = Rdict(str(path), _options())
        self._pending: dict[bytes, bytes | None] = {}
        try:
            self.layout, self._recorded = self._open_layout(key_hash)
        except BaseException:
            self._db.close()
            raise

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
        if any(True for _ in self._range(b"", None)):
            return LEGACY, True  # entries written before layouts were recorded
        return BucketLayout(key_hash or DEFAULT_KEY_HASH), False

    @property
    def bucket_ordered(self) -> bool:
        """Whether a key bucket is one key range here (the layout a split can cut)."""
        return isinstance(self.layout, BucketLayout)

    # -- the per-key API

    def get(self, key: RecordKey, name: str, default: Any = None) -> Any:
        """Entry ``name`` of record ``key`` (JSON value), or ``default``."""
        raw = self._read(self.layout.entry_key(as_bytes(key), name))
        if raw is None:
            return default
        return _decode(raw)

    def get_bytes(self, key: RecordKey, name: str) -> bytes | None:
        """Entry ``name`` of record ``key`` as stored with :meth:`set_bytes`, or None."""
        raw = self._read(self.layout.entry_key(as_bytes(key), name))
        if raw is None:
            return None
        if raw[:1] != _BYTES:
            raise TypeError(f"entry {name!r} holds JSON, not bytes")
        return raw[1:]

    def set(self, key: RecordKey, name: str, value: Any) -> None:
        """Set entry ``name`` of record ``key`` to a JSON-serializable ``value``."""
        self._pending[self.layout.entry_key(as_bytes(key), name)] = _JSON + json.dumps(
            value, separators=(",", ":")).encode()

    def set_bytes(self, key: RecordKey, name: str, value: bytes) -> None:
        """Set entry ``name`` of record ``key`` to raw bytes."""
        self._pending[self.layout.entry_key(as_bytes(key), name)] = _BYTES + bytes(value)

    def delete(self, key: RecordKey, name: str) -> None:
        """Remove entry ``name`` of record ``key`` (nothing if absent)."""
        self._pending[self.layout.entry_key(as_bytes(key), name)] = None

    def items(self, key: RecordKey) -> dict[str, Any]:
        """Every entry of record ``key``, by name (bytes entries as bytes)."""
        head = self.layout.prefix(as_bytes(key))
        found = {stored: raw for stored, raw in self._prefixed(head)}
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
        """Apply the batch's writes atomically and flush them to SST files (a snapshot
        then needs no WAL replay); returns how many entries changed."""
        if self._pending:
            batch = WriteBatch(raw_mode=True)
            for stored, raw in self._pending.items():
                if raw is None:
                    batch.delete(stored)
                else:
                    batch.put(stored, raw)
            self._write(batch)
        changed = len(self._pending)
        self._pending.clear()
        self._db.flush()
        return changed

    def discard(self) -> None:
        """Forget the running batch's writes (it failed and will be processed again)."""
        self._pending.clear()

    def snapshot(self, target: Path) -> Path:
        """A consistent copy of the committed state at ``target`` (hard links to the SST
        files, copies of the small ones): RocksDB's checkpoint."""
        if self._pending:
            raise RuntimeError("commit or discard the batch before taking a snapshot")
        target.parent.mkdir(parents=True, exist_ok=True)
        Checkpoint(self._db).create_checkpoint(str(target))
        return target

    def ingest(self, entries: Sequence[tuple[bytes, bytes]]) -> int:
        """Write stored (key, value) pairs as they are (another store's entries, when a
        split or merge composes state); returns how many."""
        if self._pending:
            raise RuntimeError("commit or discard the batch before ingesting")
        if entries:
            batch = WriteBatch(raw_mode=True)
            for stored, raw in entries:
                batch.put(stored, raw)
            self._write(batch)
        return len(entries)

    def delete_ranges(self, ranges: Sequence[KeyRange]) -> None:
        """Remove every committed entry in ``ranges`` with RocksDB's range deletions
        (tombstones: no entry is read), atomically. The files under them are compacted
        later, a bounded slice per batch (:meth:`compact_dropped`)."""
        if self._pending:
            raise RuntimeError("commit or discard the batch before deleting ranges")
        if ranges:
            batch = WriteBatch(raw_mode=True)
            for r in ranges:
                batch.delete_range(r.begin, r.end)
            # the first batch after the cut skips compaction: its backup is what a
            # split's first output waits for, and sends only what the cut wrote
            batch.put(DROPPED_KEY, ranges_to_json([*self._dropped(), *ranges], wait=1))
            self._write(batch)

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
        raw = self._db.get(DROPPED_KEY)
        if raw is None:
            return 0
        dropped, wait = ranges_of_json(bytes(raw))
        if not dropped:
            self._db.delete(DROPPED_KEY)
            return 0
        if wait > 0:
            self._db.put(DROPPED_KEY, ranges_to_json(dropped, wait - 1))
            self._db.flush()
            return 0
        first = dropped[0]
        files = sorted((f for f in self._db.live_files()
                        if bytes(f["start_key"]) < first.end
                        and bytes(f["end_key"]) >= first.begin),
                       key=lambda f: bytes(f["start_key"]))
        taken = 0
        end = first.end
        for i, f in enumerate(files):
            taken += int(f["size"])
            if taken >= budget_bytes and i + 1 < len(files):
                # up to the next file's start (files of several levels overlap: never
                # a slice that ends before it begins)
                end = min(first.end, bytes(files[i + 1]["start_key"]))
                if end <= first.begin:
                    end = first.end
                break
        if files:
            self._db.compact_range(first.begin, end)
        left = [KeyRange(end, first.end)] if first.begin < end < first.end else []
        batch = WriteBatch(raw_mode=True)
        rest = [*left, *dropped[1:]]
        if rest:
            batch.put(DROPPED_KEY, ranges_to_json(rest))
        else:
            batch.delete(DROPPED_KEY)
        self._db.write(batch)
        self._db.flush()
        return taken

    def _dropped(self) -> list[KeyRange]:
        raw = self._db.get(DROPPED_KEY)
        return [] if raw is None else ranges_of_json(bytes(raw))[0]

    def remove(self, stored: Sequence[bytes]) -> int:
        """Delete committed entries by stored key (a reshard's filter), atomically."""
        if self._pending:
            raise RuntimeError("commit or discard the batch before removing entries")
        if stored:
            batch = WriteBatch(raw_mode=True)
            for key in stored:
                batch.delete(key)
            self._write(batch)
        return len(stored)

    def entries(self, within: KeyRange | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Every committed (stored key, stored value), in key order (in ``within``)."""
        if within is None:
            if self.layout is LEGACY:
                yield from self._range(b"", None)
            else:
                yield from self._range(ENTRIES_BEGIN, ENTRIES_END)  # (not META_KEY)
        else:
            yield from self._range(within.begin, within.end)

    def split_key(self, stored: bytes) -> tuple[bytes | None, str]:
        """(record key, entry name) of one of :meth:`entries`' keys."""
        return self.layout.split(stored)

    def close(self) -> None:
        """Close RocksDB (its lock is released: another process may open the store)."""
        self._db.close()

    def __enter__(self) -> TaskStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- helpers

    def _read(self, stored: bytes) -> bytes | None:
        if stored in self._pending:
            return self._pending[stored]
        raw = self._db.get(stored)
        return None if raw is None else bytes(raw)

    def _write(self, batch: WriteBatch) -> None:
        """Apply ``batch``; a new store's first write records its layout in it (atomic:
        a store with entries always names its layout)."""
        if not self._recorded and isinstance(self.layout, BucketLayout):
            batch.put(META_KEY, self.layout.meta())
        self._db.write(batch)
        self._recorded = True

    def _prefixed(self, head: bytes) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iter()
        it.seek(head)
        while it.valid():
            stored = bytes(it.key())
            if not stored.startswith(head):
                return
            yield stored, bytes(it.value())
            it.next()

    def _range(self, begin: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iter()
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
