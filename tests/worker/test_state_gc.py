"""Garbage collection of the blob store: the plan (pure, property-tested), and collections
on real blob stores (a folder and moto's S3 API server) after which every latest
committed snapshot still restores, and nothing younger than the grace period went."""

from __future__ import annotations

import os
import time
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from worker.state.backup import Uploader, UploadResult, blob_key
from worker.state.blobs import ObjectBlobStore
from worker.state.gc import BlobCollector, plan_collection
from worker.state.restore import open_live, restore_snapshot
from worker.state.snapshot import Digests, inventory, snapshot_dir
from worker.state.store import TaskStore

NOW = 1_000_000.0
GRACE = 100.0

keys = st.sampled_from([f"k{i}" for i in range(12)])
ages = st.floats(min_value=0, max_value=3 * GRACE)


@given(st.dictionaries(st.sampled_from([f"i{i}" for i in range(8)]),
                       st.tuples(ages, st.frozensets(keys)), max_size=8),
       st.dictionaries(keys, ages), st.frozensets(st.sampled_from([f"i{i}" for i in range(8)])))
def test_the_plan_keeps_everything_a_retained_checkpoint_needs(
        indexes: dict[str, tuple[float, frozenset[str]]], blobs: dict[str, float],
        committed: frozenset[str]) -> None:
    plan = plan_collection({k: NOW - age for k, (age, _) in indexes.items()},
                           {k: NOW - age for k, age in blobs.items()}, committed,
                           lambda k: indexes[k][1], NOW, GRACE)
    retained = {k for k, (age, _) in indexes.items() if k in committed or age < GRACE}
    needed = {b for k in retained for b in indexes[k][1]}
    assert set(plan.indexes) == set(indexes) - retained  # the rest of the indexes go
    assert not set(plan.blobs) & needed  # never a blob a retained index names
    assert all(blobs[b] >= GRACE for b in plan.blobs)  # never a young blob
    assert set(plan.blobs) == {b for b, age in blobs.items()
                               if b not in needed and age >= GRACE}  # the rest go


def back_up(uploader: Uploader, live: TaskStore, state_dir: Path, task: str,
            checkpoint_id: str, start: int) -> UploadResult:
    for i in range(start, start + 200):
        live.set(f"customer-{i}", "count", i)
        live.set_bytes(f"customer-{i}", "blob", os.urandom(500))
    live.commit()
    return uploader.upload(task, checkpoint_id,
                           live.snapshot(snapshot_dir(state_dir, task, checkpoint_id)),
                           Digests())


def test_a_collection_deletes_only_what_no_retained_checkpoint_needs(
        blobs: ObjectBlobStore, tmp_path: Path) -> None:
    here = tmp_path / "host-a"
    uploader = Uploader(blobs)
    a = open_live(here, "A", None)
    a1 = back_up(uploader, a, here, "A", "1-1", 0)
    uploader.committed(a1.index)
    a2 = back_up(uploader, a, here, "A", "2-2", 200)
    uploader.committed(a2.index)  # A's latest committed
    a3 = back_up(uploader, a, here, "A", "3-3", 400)  # uploaded, its commit not yet made
    b = open_live(here, "B", None)
    b1 = back_up(uploader, b, here, "B", "1-1", 0)
    # a backup that died after one file, before its index
    orphan = here / "orphan.bin"
    orphan.write_bytes(os.urandom(1000))
    blobs.put_file("files/" + "0" * 64, orphan)
    a.close()
    b.close()
    collector = BlobCollector(blobs, grace_s=3600)
    committed = {a2.marker, b1.marker}

    young = collector.collect(committed)  # everything is younger than the grace period
    assert (young.indexes, young.blobs) == ((), ())

    later = collector.collect(committed, now=time.time() + 7200)
    assert set(later.indexes) == {a1.marker, a3.marker}
    stored = {k for k, _ in blobs.list("files/")}
    assert "files/" + "0" * 64 not in stored
    needed = {blob_key(f) for r in (a2, b1) for f in r.index.files.values()}
    assert needed <= stored
    only_a3 = {blob_key(f) for f in a3.index.files.values()} - needed
    assert only_a3 and not only_a3 & stored
    # every latest committed snapshot restores on a host that never saw it
    for result, last in ((a2, 399), (b1, 199)):
        there = tmp_path / f"host-{result.index.task_name}"
        restored = restore_snapshot(there, result.marker, blobs, Digests())
        with open_live(there, result.index.task_name, restored.folder) as store:
            assert store.get(f"customer-{last}", "count") == last

    # the next backup reuses only the committed index's blobs, which were kept
    a = open_live(here, "A", None)
    a4 = back_up(uploader, a, here, "A", "4-4", 600)
    a.close()
    assert a4.reused_files > 0
    there = tmp_path / "host-z"
    restore_snapshot(there, a4.marker, blobs, Digests())


def test_a_new_uploader_reuses_nothing_it_has_not_seen_committed(
        blobs: ObjectBlobStore, tmp_path: Path) -> None:
    """Blobs another uploader left may be collected at any moment: they are sent again
    (refreshing them) rather than named by a new index."""
    here = tmp_path / "host-a"
    live = open_live(here, "A", None)
    first = back_up(Uploader(blobs), live, here, "A", "1-1", 0)
    live.close()
    folder = snapshot_dir(here, "A", "1-1")
    again = Uploader(blobs).upload("A", "1-2", folder, Digests())
    assert again.uploaded_files == len(inventory(folder, Digests())) == len(first.index.files)
