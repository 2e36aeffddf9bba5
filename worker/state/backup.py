"""Backups of snapshots to the blob store, incremental, and the index that names them.

Blobs are content-addressed (``files/{sha256}``): a file already uploaded, by this task or
any other, is never uploaded again, so a checkpoint uploads only the SST files written
since the previous one. The snapshot index (``indexes/{task}/{checkpoint id}.json``)
lists every file of the snapshot with its blob, size and digest; it is written last, and
its key is the state checkpoint marker committed with the offsets (checkpoint v2). A crash
before the index leaves only unreferenced blobs (collected later, see ``gc``); the
previous marker stays the committed one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from worker.state.blobs import BlobStore
from worker.state.snapshot import Digests, FileInfo, inventory

MARKER_BACKEND = "blob"  # the stateCheckpointMarkers key of this backend
STORE_NAME = "state"  # one store per task


def state_marker(checkpoint: Mapping[str, Any]) -> str | None:
    """The snapshot index a checkpoint (or a ``stateSources`` entry) names, if any."""
    markers = checkpoint.get("stateCheckpointMarkers") or {}
    value = (markers.get(MARKER_BACKEND) or {}).get(STORE_NAME)
    return str(value) if value else None


def blob_key(info: FileInfo) -> str:
    """Where a file's content lives in the blob store."""
    return f"files/{info.sha256}"


def index_key(task_name: str, checkpoint_id: str) -> str:
    """Where the index of a task's snapshot lives (the task name URL-quoted)."""
    return f"indexes/{quote(task_name, safe='')}/{checkpoint_id}.json"


@dataclass(frozen=True, slots=True)
class SnapshotIndex:
    """The files of one snapshot of one task."""

    task_name: str
    checkpoint_id: str
    files: Mapping[str, FileInfo]
    created_at: float
    # the input offsets of the commit that first named this snapshot (API form: a list
    # of {ssp, offset}): how far a copy of it is behind a newer checkpoint of the task
    input_offsets: tuple[Mapping[str, Any], ...] = ()

    @property
    def size(self) -> int:
        """Bytes of state."""
        return sum(f.size for f in self.files.values())

    def to_bytes(self) -> bytes:
        """JSON."""
        return json.dumps({
            "version": 1, "taskName": self.task_name, "checkpointId": self.checkpoint_id,
            "createdAt": self.created_at, "inputOffsets": list(self.input_offsets),
            "files": {name: {"size": f.size, "sha256": f.sha256, "blob": blob_key(f)}
                      for name, f in sorted(self.files.items())}},
            sort_keys=True).encode()

    @staticmethod
    def from_bytes(raw: bytes) -> SnapshotIndex:
        """Inverse of :meth:`to_bytes`."""
        data = json.loads(raw)
        if data.get("version") != 1:
            raise ValueError(f"unknown snapshot index version {data.get('version')!r}")
        for name in data["files"]:
            parts = name.split("/")
            if name.startswith("/") or any(p in ("", ".", "..") for p in parts):
                raise ValueError(f"snapshot index names a file outside its snapshot: "
                                 f"{name!r}")
        return SnapshotIndex(
            data["taskName"], data["checkpointId"],
            {name: FileInfo(int(f["size"]), str(f["sha256"]))
             for name, f in data["files"].items()},
            float(data["createdAt"]), tuple(data.get("inputOffsets") or ()))


@dataclass(frozen=True, slots=True)
class UploadResult:
    """What a backup did: its marker, and how much it sent."""

    marker: str
    index: SnapshotIndex
    uploaded_files: int
    uploaded_bytes: int
    reused_files: int
    seconds: float
    index_bytes: bytes = b""  # the index as uploaded (a local copy need not encode it again)
    ahead_files: int = 0  # files found sent ahead (``worker.state.presend``), not sent


class Uploader:
    """Uploads snapshots, reusing only the blobs of each task's last committed index.

    Reusing a blob that only *some* index names (another task's, or one never committed)
    would race the garbage collector (``worker.state.gc``), which keeps old blobs only
    while a latest committed checkpoint references them; so every other file is sent
    again (content-addressed: the same key, now young), unless ``sent`` says it was sent
    moments ago (young too: ``worker.state.presend``)."""

    def __init__(self, blobs: BlobStore, parallelism: int = 8,
                 pool: ThreadPoolExecutor | None = None,
                 sent: Callable[[str, Mapping[str, str]], set[str]] | None = None) -> None:
        self._blobs = blobs
        # the blobs sent ahead of the backups (``worker.state.presend``): young, so
        # named safely by an index written now
        self._sent = sent
        self._parallelism = parallelism
        # a worker's uploads share one pool: starting its threads again for every
        # commit cost ~16 ms a commit at 4 GB beside a batch (bench/RESULTS.md)
        self._pool = pool
        self._reusable: dict[str, frozenset[str]] = {}  # task -> blobs of its committed index

    def committed(self, index: SnapshotIndex) -> None:
        """``index`` is its task's latest committed snapshot (acknowledged or restored)."""
        self._reusable[index.task_name] = frozenset(blob_key(f) for f in index.files.values())

    def inherits(self, task_name: str, sources: Sequence[SnapshotIndex]) -> None:
        """``task_name`` was composed from ``sources`` (a split's parent, a merge's
        children: the indexes its ``stateSources`` name) and has committed nothing of its
        own: its first upload may reuse their blobs. Safe against the collector: a
        source is the *last* checkpoint of a task of an older job model, which commits no
        more (fenced), and every task's last checkpoint is retained, older models'
        included. A split child's snapshot shares its parent's files (hard links cut by
        range deletions), so its first backup sends only what the cut wrote."""
        self._reusable[task_name] = frozenset(
            blob_key(f) for index in sources for f in index.files.values())

    def upload(self, task_name: str, checkpoint_id: str, folder: Path, digests: Digests,
               input_offsets: Sequence[Mapping[str, Any]] = ()) -> UploadResult:
        """Upload what the task's committed index lacks of ``folder``'s files, then the
        index. Raises on any failure (the commit then fails; nothing committed changes)."""
        started = time.perf_counter()
        files = inventory(folder, digests)
        reuse = self._reusable.get(task_name, frozenset())
        to_send = {blob_key(info): name for name, info in files.items()
                   if blob_key(info) not in reuse}
        ahead = 0
        if self._sent is not None and to_send:
            for key in self._sent(task_name, {name: key for key, name in to_send.items()}):
                del to_send[key]
                ahead += 1
        def send(item: tuple[str, str]) -> None:
            self._blobs.put_file(item[0], folder / item[1])

        if self._pool is not None:
            list(self._pool.map(send, to_send.items()))
        else:
            with ThreadPoolExecutor(self._parallelism) as pool:
                list(pool.map(send, to_send.items()))
        index = SnapshotIndex(task_name, checkpoint_id, files, time.time(),
                              tuple(input_offsets))
        marker = index_key(task_name, checkpoint_id)
        raw = index.to_bytes()
        self._blobs.put(marker, raw)
        return UploadResult(marker, index, len(to_send),
                            sum(files[name].size for name in to_send.values()),
                            len(files) - len(to_send) - ahead,
                            time.perf_counter() - started, raw, ahead)
