"""Running tasks' new SST files sent ahead of their backups (``worker.state.presend``), on
a real blob store: only files written after the first look, only once they stopped
growing, and a backup then sends none of them again, while its index restores whole."""

from __future__ import annotations

import os
from pathlib import Path

from tests.worker.test_state_backup import write_batch
from worker.state.backup import Uploader, blob_key
from worker.state.blobs import ObjectBlobStore
from worker.state.presend import SST_MAGIC, PreSender
from worker.state.restore import open_live, restore_snapshot
from worker.state.snapshot import Digests, snapshot_dir, task_dir

TASK = "Partition 0_0_2"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _presender(blobs: ObjectBlobStore, state_dir: Path, digests: Digests, clock: Clock
               ) -> PreSender:
    return PreSender(blobs, digests, lambda task: task_dir(state_dir, task) / "live",
                     fresh_s=3600, clock=clock)


def _ssts(folder: Path) -> set[str]:
    return {n for n in os.listdir(folder) if n.endswith(".sst")}


def test_new_files_go_ahead_and_the_backup_sends_only_the_rest(
        blobs: ObjectBlobStore, tmp_path: Path) -> None:
    state_dir, digests, clock = tmp_path / "state", Digests(), Clock()
    live = open_live(state_dir, TASK, None)
    write_batch(live, 0, 200)
    ahead = _presender(blobs, state_dir, digests, clock)
    uploader = Uploader(blobs, sent=ahead.sent)
    first = uploader.upload(TASK, "1-1", live.snapshot(snapshot_dir(state_dir, TASK, "1-1")),
                            digests)
    uploader.committed(first.index)
    folder = task_dir(state_dir, TASK) / "live"
    ahead.look([TASK])  # the first look: what is there is not sent ahead
    ahead.look([TASK])
    assert ahead.sent_bytes == 0
    before = _ssts(folder)
    write_batch(live, 200, 300)  # a batch: a new flushed file
    new = _ssts(folder) - before
    assert new
    ahead.look([TASK])  # whole (its footer written): sent
    ahead.sent(TASK, dict.fromkeys(new, ""))  # (its send awaited)
    assert ahead.sent_bytes == sum(os.path.getsize(folder / n) for n in new)
    second = uploader.upload(TASK, "1-2",
                             live.snapshot(snapshot_dir(state_dir, TASK, "1-2")), digests)
    assert new <= set(second.index.files)  # new to the index...
    before_blobs = {blob_key(f) for f in first.index.files.values()}
    left = {blob_key(f): f.size for name, f in second.index.files.items()
            if blob_key(f) not in before_blobs and name not in new}
    assert second.uploaded_bytes == sum(left.values())  # (MANIFEST, OPTIONS: small)
    # ... yet not sent again, and the index restores whole elsewhere
    live.close()
    restored = restore_snapshot(tmp_path / "elsewhere", second.marker, blobs, Digests())
    store = open_live(tmp_path / "elsewhere", TASK, restored.folder)
    try:
        assert store.get("customer-450", "count") == 450
        assert store.get("customer-0", "count") == 0
    finally:
        store.close()


def test_a_file_being_written_waits_and_a_stale_send_is_sent_again(
        blobs: ObjectBlobStore, tmp_path: Path) -> None:
    state_dir, digests, clock = tmp_path / "state", Digests(), Clock()
    folder = task_dir(state_dir, TASK) / "live"
    folder.mkdir(parents=True)
    ahead = _presender(blobs, state_dir, digests, clock)
    ahead.look([TASK])
    part = folder / "000042.sst"
    part.write_bytes(b"a" * 1000)  # a compaction still writing it: no footer yet
    ahead.look([TASK])
    ahead.look([TASK])
    assert ahead.sent_bytes == 0
    with part.open("ab") as f:
        f.write(b"b" * 992 + SST_MAGIC)  # its footer, last
    ahead.look([TASK])
    key = f"files/{digests.of(part).sha256}"
    assert ahead.sent(TASK, {part.name: key}) == {key}
    assert ahead.sent_bytes == 2000
    assert blobs.exists(key)
    clock.now += 3600 / 2 + 1  # past half the collector's grace: a backup sends it again
    assert ahead.sent(TASK, {part.name: key}) == set()
    # a file a backup took is never sent ahead (no file twice)
    claimed = folder / "000044.sst"
    claimed.write_bytes(b"d" + SST_MAGIC)
    ahead.sent(TASK, {claimed.name: "files/whatever"})
    ahead.look([TASK])
    assert ahead.sent_bytes == 2000
    # a task no longer running is forgotten; back, its files are there "from before"
    ahead.look([])
    (folder / "000043.sst").write_bytes(b"c" + SST_MAGIC)
    ahead.look([TASK])
    ahead.look([TASK])
    ahead.look([TASK])
    assert ahead.sent_bytes == 2000


def test_a_rebuilt_store_is_not_sent_again(blobs: ObjectBlobStore, tmp_path: Path) -> None:
    """A restore replaces the live folder: its files came from blobs, none goes ahead."""
    state_dir, digests, clock = tmp_path / "state", Digests(), Clock()
    folder = task_dir(state_dir, TASK) / "live"
    folder.mkdir(parents=True)
    ahead = _presender(blobs, state_dir, digests, clock)
    ahead.look([TASK])
    rebuilt = folder.with_name("live.new")
    rebuilt.mkdir()
    for i in range(3):
        (rebuilt / f"00000{i}.sst").write_bytes(b"x" * 10 * (i + 1) + SST_MAGIC)
    folder.rmdir()
    rebuilt.rename(folder)
    for _ in range(3):
        ahead.look([TASK])
    assert ahead.sent_bytes == 0
