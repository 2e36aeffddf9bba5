"""A task's state composed from other tasks' snapshots, filtered by key bucket (and, for a
Kinesis child shard, by the hash-key range of the child): what a split child or a merged
task starts from (``checkpoint.state_sources`` says which).

Each source snapshot is made present locally (``restore_snapshot``: local files first,
then downloads), copied aside (hard links), opened, and every entry whose record key
falls in the source's buckets is written into the new store; null-key entries only from
the source flagged for them. The sources' key sets are disjoint by construction, so the
order of writes does not matter. The caller snapshots the result under a new checkpoint
id, and the task's first commit uploads that snapshot: from then on it depends on no
other task's blobs.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grouping.key_bucket import key_bucket
from grouping.key_hash import key_hash_of
from grouping.shards import MAX_HASH_KEY, hash_key
from worker.state.backup import state_marker
from worker.state.blobs import BlobStore
from worker.state.keys import split
from worker.state.restore import restore_snapshot
from worker.state.snapshot import Digests, clone, task_dir
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


def is_own_whole(task: str, sources: Sequence[Mapping[str, Any]]) -> bool:
    """One source, the task itself: its own snapshot holds all of its state."""
    return len(sources) == 1 and sources[0].get("taskName") == task


def _filter(source: Mapping[str, Any]) -> Callable[[bytes | None], bool]:
    """Whether a record key's entries belong to this task, by one ``stateSources`` entry:
    its bucket under the source's factor is listed (null keys: when ``nullKeys``) and,
    for a parent shard's snapshot, its Kinesis hash key is in the child's range."""
    factor = int(source["elasticityFactor"])
    key_hash = key_hash_of(source)  # the job's: absent from a coordinator before it, crc32
    buckets = frozenset(int(b) for b in source["keyBuckets"])
    null_keys = bool(source.get("nullKeys"))
    within = source.get("hashKeyRange")
    low, high = (int(within[0]), int(within[1])) if within else (0, MAX_HASH_KEY)

    def keep(key: bytes | None) -> bool:
        if key is None:
            return null_keys
        return key_bucket(key, 0, factor, key_hash) in buckets and (
            within is None or low <= hash_key(key) <= high)

    return keep


def compose(state_dir: Path, task: str, sources: Sequence[Mapping[str, Any]],
            blobs: BlobStore, digests: Digests, into: Path) -> Composed:
    """Build a fresh store at ``into`` holding, from each source snapshot, the entries of
    its key buckets (API ``stateSources``)."""
    started = time.perf_counter()
    shutil.rmtree(into, ignore_errors=True)
    files = size = written = 0
    target = TaskStore(into)
    try:
        for i, source in enumerate(sources):
            marker = state_marker(source)
            if marker is None:
                continue
            restored = restore_snapshot(state_dir, marker, blobs, digests)
            files += restored.downloaded_files
            size += restored.downloaded_bytes
            keep = _filter(source)
            aside = task_dir(state_dir, task) / f"compose-{i}"
            clone(restored.folder, aside)
            try:
                with TaskStore(aside) as store:
                    pending: list[tuple[bytes, bytes]] = []
                    for stored, raw in store.entries():
                        if keep(split(stored)[0]):
                            pending.append((stored, raw))
                        if len(pending) >= BATCH:
                            written += target.ingest(pending)
                            pending = []
                    written += target.ingest(pending)
            finally:
                shutil.rmtree(aside, ignore_errors=True)
        target.commit()
    finally:
        target.close()
    return Composed(tuple(str(s.get("taskName")) for s in sources), written, files, size,
                    time.perf_counter() - started)
