"""A task's state from its committed marker, fetching only what is not here already.

If this processor's state dir holds the snapshot the marker names (the task came back to
its host: SAMZA-1554), it is used as it is: zero bytes downloaded. Otherwise the snapshot
is assembled from files already here (any local snapshot of the task holding a file with
the same digest, hard-linked) and downloads of the rest, in parallel, each checked against
its digest; it is built beside its final place and renamed into it, so a crash or a
failed download never leaves a snapshot that looks whole.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from worker.state.backup import SnapshotIndex, blob_key
from worker.state.blobs import BlobStore
from worker.state.rocks import FEW_FILES, FILES_ON_USE
from worker.state.snapshot import (
    Digests,
    FileInfo,
    claim_task_dir,
    clone,
    index_path,
    inventory,
    snapshot_dir,
    task_dir,
)
from worker.state.store import TaskStore


class CorruptBlob(Exception):
    """A downloaded file does not have the digest its index names."""


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """Where the snapshot is and what it cost."""

    folder: Path
    index: SnapshotIndex
    downloaded_files: int
    downloaded_bytes: int
    local_files: int
    seconds: float
    resumed_files: int = 0  # fetched by an earlier attempt that was interrupted

    @property
    def source(self) -> str:
        """``local`` (nothing downloaded), ``partial`` or ``remote`` (everything)."""
        if self.downloaded_files == 0:
            return "local"
        return "remote" if self.local_files == 0 else "partial"


def restore_snapshot(state_dir: Path, marker: str, blobs: BlobStore, digests: Digests,
                     parallelism: int = 8, neighbours: Sequence[str] = ()) -> RestoreResult:
    """Make the snapshot ``marker`` names present under ``state_dir``; files of the
    task's other local snapshots, or of ``neighbours``' (tasks whose snapshots may share
    files with it: a merge's other sources), are linked rather than downloaded."""
    started = time.perf_counter()
    index = SnapshotIndex.from_bytes(blobs.get(marker))
    target = snapshot_dir(state_dir, index.task_name, index.checkpoint_id)
    if target.exists() and inventory(target, digests) == dict(index.files):
        index_path(target).write_bytes(index.to_bytes())
        return RestoreResult(target, index, 0, 0, len(index.files),
                             time.perf_counter() - started)
    claim_task_dir(state_dir, index.task_name)
    local: dict[str, Path] = {}
    for task in (index.task_name, *neighbours):
        for digest, path in _local_files(state_dir, task, digests).items():
            local.setdefault(digest, path)
    staging = target.with_name(target.name + ".partial")
    resumed = _resume_staging(staging, index, digests)
    fetch: dict[str, FileInfo] = {}
    for name, info in index.files.items():
        if name in resumed:
            continue  # fetched by an earlier attempt that was cut short
        (staging / name).parent.mkdir(parents=True, exist_ok=True)  # a part's folder
        have = local.get(info.sha256)
        if have is not None and name.endswith(".sst"):
            os.link(have, staging / name)
        elif have is not None:
            shutil.copy2(have, staging / name)  # mutable RocksDB files are copied
        else:
            fetch[name] = info

    def download(item: tuple[str, FileInfo]) -> int:
        name, info = item
        size = blobs.get_file(blob_key(info), staging / name)
        if digests.of(staging / name) != info:
            raise CorruptBlob(f"{blob_key(info)} does not match the index of {marker}")
        return size

    with ThreadPoolExecutor(parallelism) as pool:
        sizes = list(pool.map(download, fetch.items()))
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    index_path(target).write_bytes(index.to_bytes())
    return RestoreResult(target, index, len(fetch), sum(sizes), len(index.files) - len(fetch),
                         time.perf_counter() - started, len(resumed))


def _resume_staging(staging: Path, index: SnapshotIndex, digests: Digests) -> set[str]:
    """The files an earlier, interrupted restore of this snapshot already placed in
    ``staging`` whole and with the right digest (kept: a rebalance or a crash during a
    restore must not start it again from zero, quix-streams#1146); anything else there is
    removed."""
    if not staging.is_dir():
        staging.mkdir(parents=True)
        return set()
    kept: set[str] = set()
    for path in sorted(staging.rglob("*"), reverse=True):  # a folder after its files
        name = path.relative_to(staging).as_posix()
        info = index.files.get(name)
        if info is not None and path.is_file() and digests.of(path) == info:
            kept.add(name)
        elif path.is_dir():
            if not any(path.iterdir()):
                path.rmdir()  # a part's folder left empty (or no part's)
        else:
            path.unlink(missing_ok=True)  # a .partial download or a stranger
    return kept


def open_live(state_dir: Path, task_name: str, snapshot: Path | None, *,
              compact: bool = True) -> TaskStore:
    """The task's live store, started from ``snapshot`` (None: empty state). Always from a
    committed snapshot, never from a live store left behind: that one may be ahead of the
    checkpoint (a batch processed but not committed). ``compact``: as for ``TaskStore``
    (False for a store only opened to be made, whose batch compacts it; it opens few of
    its files too, ``rocks.FEW_FILES``)."""
    live = claim_task_dir(state_dir, task_name) / "live"
    if snapshot is None:
        shutil.rmtree(live, ignore_errors=True)
    else:
        clone(snapshot, live)
    return TaskStore(live, compact=compact, open_files=FILES_ON_USE if compact else FEW_FILES)


def _local_files(state_dir: Path, task_name: str, digests: Digests) -> dict[str, Path]:
    """Files of the task's local snapshots, by digest."""
    found: dict[str, Path] = {}
    root = task_dir(state_dir, task_name) / "snapshots"
    if root.exists():
        for folder in sorted(root.iterdir()):
            if folder.is_dir() and not folder.name.endswith(".partial"):
                for name, info in inventory(folder, digests).items():
                    found.setdefault(info.sha256, folder / name)
    return found
