"""Snapshots backed up to a real blob store (a local folder, and moto's S3 API server
started as a process) and restored: incremental uploads, zero bytes when the snapshot is
here already (host affinity), only the missing files otherwise, and nothing half-done."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from worker.state.backup import Uploader, UploadResult, blob_key
from worker.state.blobs import ObjectBlobStore
from worker.state.restore import CorruptBlob, open_live, restore_snapshot
from worker.state.snapshot import Digests, inventory, snapshot_dir
from worker.state.store import TaskStore

TASK = "Partition 0_1_2"


def committed_state(blobs: ObjectBlobStore, state_dir: Path, customers: int,
                    payload: int) -> tuple[TaskStore, UploadResult]:
    """A live store of ``customers`` committed and backed up (checkpoint 1-1)."""
    live = open_live(state_dir, TASK, None)
    write_batch(live, 0, customers, payload=payload)
    done = Uploader(blobs).upload(
        TASK, "1-1", live.snapshot(snapshot_dir(state_dir, TASK, "1-1")), Digests())
    return live, done


def write_batch(store: TaskStore, start: int, count: int, payload: int = 2000) -> None:
    for i in range(start, start + count):
        store.set(f"customer-{i}", "count", i)
        store.set_bytes(f"customer-{i}", "blob", os.urandom(payload))
    store.commit()


def test_backups_are_incremental_and_restores_fetch_only_what_is_missing(
    blobs: ObjectBlobStore, tmp_path: Path,
) -> None:
    here, there = tmp_path / "host-a", tmp_path / "host-b"
    digests, uploader = Digests(), Uploader(blobs)
    live = open_live(here, TASK, None)
    write_batch(live, 0, 500)
    first = uploader.upload(TASK, "1000-1", live.snapshot(snapshot_dir(here, TASK, "1000-1")),
                            digests)
    assert first.uploaded_files == len(first.index.files) and first.reused_files == 0
    uploader.committed(first.index)  # acknowledged: its files may be reused
    write_batch(live, 500, 500)
    second = uploader.upload(TASK, "2000-2", live.snapshot(snapshot_dir(here, TASK, "2000-2")),
                             digests)
    # the first batch's SST file is in both snapshots and was sent once
    shared = {f.sha256 for f in first.index.files.values()} & {
        f.sha256 for f in second.index.files.values()}
    assert shared and second.reused_files >= 1
    assert second.uploaded_bytes < second.index.size
    uploader.committed(second.index)
    again = uploader.upload(TASK, "2000-2b", snapshot_dir(here, TASK, "2000-2"), digests)
    assert again.uploaded_files == 0
    live.close()

    # the task comes back to its host: the committed snapshot is here, nothing downloaded
    home = restore_snapshot(here, second.marker, blobs, digests)
    assert (home.source, home.downloaded_bytes) == ("local", 0)
    # a host that never saw the task downloads everything, checked against the digests
    away = restore_snapshot(there, second.marker, blobs, Digests())
    assert away.source == "remote" and away.downloaded_bytes == second.index.size
    with open_live(there, TASK, away.folder) as restored:
        assert restored.get("customer-999", "count") == 999
        assert len(restored.items("customer-3")["blob"]) == 2000
    # a host holding the older snapshot downloads only the newer files
    older = tmp_path / "host-c"
    restore_snapshot(older, first.marker, blobs, Digests())
    partial = restore_snapshot(older, second.marker, blobs, Digests())
    assert partial.source == "partial"
    assert 0 < partial.downloaded_bytes < second.index.size


def test_a_restore_never_starts_from_a_live_store_that_is_ahead(
    blobs: ObjectBlobStore, tmp_path: Path,
) -> None:
    live, committed = committed_state(blobs, tmp_path, 10, payload=10)
    write_batch(live, 10, 10, payload=10)  # processed, never committed (then a crash)
    live.close()
    snapshot = restore_snapshot(tmp_path, committed.marker, blobs, Digests())
    with open_live(tmp_path, TASK, snapshot.folder) as store:
        assert store.get("customer-15", "count") is None
        assert store.get("customer-5", "count") == 5


def test_an_upload_cut_short_leaves_the_previous_marker_whole(
    blobs: ObjectBlobStore, tmp_path: Path,
) -> None:
    live, committed = committed_state(blobs, tmp_path, 50, payload=100)
    write_batch(live, 50, 50, payload=100)
    newer = live.snapshot(snapshot_dir(tmp_path, TASK, "2-2"))
    live.close()
    # the process dies after sending one file of the newer snapshot, before its index
    name, info = next((n, i) for n, i in inventory(newer, Digests()).items()
                      if n.endswith(".sst") and not blobs.exists(blob_key(i)))
    blobs.put_file(blob_key(info), newer / name)
    elsewhere = restore_snapshot(tmp_path / "other", committed.marker, blobs, Digests())
    with open_live(tmp_path / "other", TASK, elsewhere.folder) as store:
        assert store.get("customer-49", "count") == 49
        assert store.get("customer-50", "count") is None


def test_a_corrupt_blob_is_refused_and_leaves_no_snapshot(
    blobs: ObjectBlobStore, tmp_path: Path,
) -> None:
    live, done = committed_state(blobs, tmp_path / "a", 20, payload=100)
    live.close()
    sst = next(i for n, i in done.index.files.items() if n.endswith(".sst"))
    blobs.put(blob_key(sst), b"not what was uploaded")
    with pytest.raises(CorruptBlob):
        restore_snapshot(tmp_path / "b", done.marker, blobs, Digests())
    assert not snapshot_dir(tmp_path / "b", TASK, "1-1").exists()


class CutShort:
    """The real blob store, with the connection lost after ``n`` downloads (a crash or a
    rebalance that interrupts a restore)."""

    def __init__(self, blobs: ObjectBlobStore, n: int) -> None:
        self._blobs, self._left = blobs, n

    def __getattr__(self, name: str) -> object:
        return getattr(self._blobs, name)

    def get_file(self, key: str, path: Path) -> int:
        if self._left <= 0:
            raise ConnectionError("connection lost")
        self._left -= 1
        return self._blobs.get_file(key, path)


def test_an_interrupted_restore_resumes_where_it_stopped(
    blobs: ObjectBlobStore, tmp_path: Path,
) -> None:
    """quix-streams #1146 / #1067: a rebalance during a restore started it from zero."""
    here = tmp_path / "host-a"
    live = open_live(here, TASK, None)
    uploader = Uploader(blobs)
    digests = Digests()
    for i in range(4):  # several SST files
        write_batch(live, i * 100, 100, payload=5000)
        live.snapshot(snapshot_dir(here, TASK, f"{i + 1}-1"))
    done = uploader.upload(TASK, "4-1", snapshot_dir(here, TASK, "4-1"), digests)
    live.close()
    assert len(done.index.files) >= 4
    there = tmp_path / "host-b"
    with pytest.raises(ConnectionError):
        restore_snapshot(there, done.marker, CutShort(blobs, 2),  # type: ignore[arg-type]
                         Digests(), parallelism=1)
    again = restore_snapshot(there, done.marker, blobs, Digests())
    assert again.resumed_files == 2
    assert again.downloaded_files == len(done.index.files) - 2
    with open_live(there, TASK, again.folder) as store:
        assert store.get("customer-399", "count") == 399
