"""A task's state store: RocksDB (through rocksdict) with the per-key API of
``process_task``'s ``ctx.state``.

Writes of a batch are kept aside and reach RocksDB in one atomic write batch at
:meth:`TaskStore.commit` (reads see them before that): a batch that fails leaves the store
as it was after the previous batch. Values are JSON by default; ``set_bytes`` stores raw
bytes. Each stored value carries a one-byte tag of its kind, so reads need no schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from rocksdict import Checkpoint, Options, Rdict, WriteBatch

from worker.state.keys import as_bytes, entry_key, prefix, split

_JSON, _BYTES = b"J", b"B"
RecordKey = bytes | str | None


def _options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    return options


class TaskStore:
    """The state of one task on this processor (one RocksDB instance under ``path``)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = Rdict(str(path), _options())
        self._pending: dict[bytes, bytes | None] = {}

    # -- the per-key API

    def get(self, key: RecordKey, name: str, default: Any = None) -> Any:
        """Entry ``name`` of record ``key`` (JSON value), or ``default``."""
        raw = self._read(entry_key(as_bytes(key), name))
        if raw is None:
            return default
        return _decode(raw)

    def get_bytes(self, key: RecordKey, name: str) -> bytes | None:
        """Entry ``name`` of record ``key`` as stored with :meth:`set_bytes`, or None."""
        raw = self._read(entry_key(as_bytes(key), name))
        if raw is None:
            return None
        if raw[:1] != _BYTES:
            raise TypeError(f"entry {name!r} holds JSON, not bytes")
        return raw[1:]

    def set(self, key: RecordKey, name: str, value: Any) -> None:
        """Set entry ``name`` of record ``key`` to a JSON-serializable ``value``."""
        self._pending[entry_key(as_bytes(key), name)] = _JSON + json.dumps(
            value, separators=(",", ":")).encode()

    def set_bytes(self, key: RecordKey, name: str, value: bytes) -> None:
        """Set entry ``name`` of record ``key`` to raw bytes."""
        self._pending[entry_key(as_bytes(key), name)] = _BYTES + bytes(value)

    def delete(self, key: RecordKey, name: str) -> None:
        """Remove entry ``name`` of record ``key`` (nothing if absent)."""
        self._pending[entry_key(as_bytes(key), name)] = None

    def items(self, key: RecordKey) -> dict[str, Any]:
        """Every entry of record ``key``, by name (bytes entries as bytes)."""
        head = prefix(as_bytes(key))
        found = {stored: raw for stored, raw in self._range(head)}
        for stored, raw in self._pending.items():
            if stored.startswith(head) and split(stored)[0] == as_bytes(key):
                if raw is None:
                    found.pop(stored, None)
                else:
                    found[stored] = raw
        return {split(stored)[1]: _decode(raw) for stored, raw in sorted(found.items())}

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
            self._db.write(batch)
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
            self._db.write(batch)
        return len(entries)

    def entries(self) -> Iterator[tuple[bytes, bytes]]:
        """Every committed (stored key, stored value), in key order."""
        yield from self._range(b"")

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

    def _range(self, head: bytes) -> Iterator[tuple[bytes, bytes]]:
        it = self._db.iter()
        it.seek(head)
        while it.valid():
            stored = bytes(it.key())
            if not stored.startswith(head):
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
