"""Garbage collection of the blob store: snapshot indexes and file blobs that no retained
checkpoint needs.

Retained: the index named by the latest committed checkpoint of every task (whatever
task it was written by), and every index younger than the grace period (a commit in
flight, or a standby about to fetch the snapshot that was latest a moment ago). Kept:
every blob a retained index references, and every blob younger than the grace period
(uploaded by a backup whose index is not written yet). Everything else goes, indexes
first: a crash mid-collection leaves unreferenced blobs for the next round, never an
index whose blobs are gone.

Why this is safe against a backup running at the same time: a backup uploads every file
again unless the task's last *committed* index already references its blob
(``backup.Uploader``), so it only ever reuses blobs that the latest committed checkpoint
keeps; and an upload rewrites a blob, making it young again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from worker.state.backup import SnapshotIndex, blob_key
from worker.state.blobs import BlobStore

log = logging.getLogger("coxswain.worker.state")

INDEXES = "indexes/"
FILES = "files/"


@dataclass(frozen=True, slots=True)
class GcPlan:
    """What one collection deletes, and what it keeps."""

    indexes: tuple[str, ...]
    blobs: tuple[str, ...]
    kept_indexes: int
    kept_blobs: int


def plan_collection(indexes: Mapping[str, float], blobs: Mapping[str, float],
                    committed_markers: Iterable[str],
                    references: Callable[[str], Iterable[str]],
                    now: float, grace_s: float) -> GcPlan:
    """Which ``indexes`` and ``blobs`` (key -> last modified) to delete.

    ``committed_markers``: the index named by each task's latest committed checkpoint;
    ``references(index)``: the blob keys that index lists (KeyError if it is gone)."""
    horizon = now - grace_s
    retained = {k for k in indexes if indexes[k] > horizon} | \
        {m for m in committed_markers if m in indexes}
    referenced: set[str] = set()
    for key in retained:
        try:
            referenced.update(references(key))
        except KeyError:  # deleted by a concurrent collection: nothing it names is kept
            continue
    dead_indexes = sorted(k for k in indexes if k not in retained)
    dead_blobs = sorted(k for k, at in blobs.items()
                        if k not in referenced and at <= horizon)
    return GcPlan(tuple(dead_indexes), tuple(dead_blobs),
                  len(retained), len(blobs) - len(dead_blobs))


class BlobCollector:
    """Runs collections on a blob store."""

    def __init__(self, blobs: BlobStore, grace_s: float) -> None:
        self._blobs = blobs
        self.grace_s = grace_s

    def collect(self, committed_markers: Iterable[str], now: float | None = None) -> GcPlan:
        """Delete what no retained checkpoint needs; returns what was deleted."""
        started = time.monotonic()
        indexes = dict(self._blobs.list(INDEXES))
        blobs = dict(self._blobs.list(FILES))
        plan = plan_collection(indexes, blobs, committed_markers, self._references,
                               time.time() if now is None else now, self.grace_s)
        for key in plan.indexes:
            self._blobs.delete(key)
        for key in plan.blobs:
            self._blobs.delete(key)
        if plan.indexes or plan.blobs:
            log.info("blob store collected: %d indexes and %d blobs deleted, %d indexes and "
                     "%d blobs kept (%.1fs)", len(plan.indexes), len(plan.blobs),
                     plan.kept_indexes, plan.kept_blobs, time.monotonic() - started)
        return plan

    def _references(self, index: str) -> list[str]:
        parsed = SnapshotIndex.from_bytes(self._blobs.get(index))
        return [blob_key(f) for f in parsed.files.values()]
