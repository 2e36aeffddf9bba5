"""Task state kept where the task runs (``worker.state.executor``), with real RocksDB
stores and a real folder blob store, outside Spark: a batch's state brought to its base,
snapshotted, uploaded and reported; a task moving to another executor's disk; and
failures at each step leaving nothing that could be taken for a base."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from worker.state.backup import SnapshotIndex
from worker.state.blobs import BlobStoreOptions, open_blob_store
from worker.state.executor import (
    BASE_FILE,
    DIRTY,
    ExecutorStatePlan,
    Report,
    TaskBase,
    executor_task_state,
    held_base,
)
from worker.state.remote import base_of
from worker.state.snapshot import task_dir
from worker.state.tasks import new_checkpoint_id

TASK = "Partition 0_1_2"


class Collected:
    """What a Spark accumulator does for one successful attempt: keeps the reports."""

    def __init__(self) -> None:
        self.value: dict[tuple[int, str], Report] = {}

    def add(self, update: dict[tuple[int, str], Report]) -> None:
        self.value.update(update)


def plan(state_dir: Path, blobs: str, batch_id: int, base: TaskBase,
         reports: Collected) -> ExecutorStatePlan:
    return ExecutorStatePlan(str(state_dir), blobs, None, BlobStoreOptions(), batch_id,
                             new_checkpoint_id(), {TASK: base}, reports)


def count(p: ExecutorStatePlan, keys: list[bytes]) -> dict[bytes, int]:
    """One batch of the counting app over ``keys``: the counts after it."""
    out: dict[bytes, int] = {}
    with executor_task_state(p, TASK) as state:
        store = state()
        for k in keys:
            out[k] = store.get(k, "count", 0) + 1
            store.set(k, "count", out[k])
    return out


def next_base(p: ExecutorStatePlan, reports: Collected, committed: str | None = None
              ) -> TaskBase:
    report = reports.value[(p.batch_id, TASK)]
    return TaskBase(report.checkpoint_id, report.marker, committed_marker=committed)


def test_a_task_keeps_its_store_while_it_stays_and_restores_it_where_it_moves(
    tmp_path: Path
) -> None:
    blobs = f"file://{tmp_path / 'blobs'}"
    here, there, reports = tmp_path / "executor-a", tmp_path / "executor-b", Collected()
    first = plan(here, blobs, 1, TaskBase(), reports)
    assert count(first, [b"k1", b"k1", b"k2"]) == {b"k1": 2, b"k2": 1}
    report = reports.value[(1, TASK)]
    assert report.restore == "empty" and report.uploaded_files > 0
    index = SnapshotIndex.from_bytes(open_blob_store(blobs).get(report.marker))
    assert index.task_name == TASK and index.checkpoint_id == first.checkpoint_id
    assert held_base(here, TASK) == first.checkpoint_id

    second = plan(here, blobs, 2, next_base(first, reports, report.marker), reports)
    assert count(second, [b"k1"]) == {b"k1": 3}
    assert reports.value[(2, TASK)].restore == "kept"  # nothing moved
    # the same task on another executor's disk: its base from the blob store
    third = plan(there, blobs, 3, next_base(second, reports, report.marker), reports)
    assert count(third, [b"k1", b"k2"]) == {b"k1": 4, b"k2": 2}
    assert reports.value[(3, TASK)].restore == "remote"
    # and back: the older copy here is not the base any more; only what changed moves
    fourth = plan(here, blobs, 4, next_base(third, reports, report.marker), reports)
    assert count(fourth, [b"k2"]) == {b"k2": 3}
    assert reports.value[(4, TASK)].restore == "partial"
    snapshots = sorted(p.name for p in (task_dir(here, TASK) / "snapshots").iterdir()
                       if p.is_dir())
    assert snapshots == sorted([third.checkpoint_id, fourth.checkpoint_id])  # 2 kept


def test_a_failed_batch_leaves_the_base_and_a_failed_upload_leaves_no_claim(
    tmp_path: Path
) -> None:
    root = tmp_path / "blobs"
    blobs = f"file://{root}"
    here, reports = tmp_path / "executor", Collected()
    first = plan(here, blobs, 1, TaskBase(), reports)
    count(first, [b"k"])
    base = next_base(first, reports)

    failing = plan(here, blobs, 2, base, reports)
    with pytest.raises(RuntimeError), executor_task_state(failing, TASK) as state:
        state().set(b"k", "count", 99)
        raise RuntimeError("process_task failed")
    assert (2, TASK) not in reports.value
    assert held_base(here, TASK) == first.checkpoint_id  # writes discarded: still the base

    # the upload fails after the batch's writes went to the live store
    shutil.move(root, tmp_path / "blobs-away")
    root.write_text("not a folder")  # a real failure of the file store's writes
    uploading = plan(here, blobs, 3, base, reports)
    with pytest.raises(Exception):  # noqa: B017 (whatever the store raises)
        count(uploading, [b"k"])
    assert (3, TASK) not in reports.value
    assert (task_dir(here, TASK) / BASE_FILE).read_text() == DIRTY
    assert held_base(here, TASK) is None  # ahead of every snapshot: never a base

    root.unlink()
    shutil.move(tmp_path / "blobs-away", root)
    again = plan(here, blobs, 4, base, reports)
    assert count(again, [b"k"]) == {b"k": 2}  # from the base, not the failed batch's
    assert reports.value[(4, TASK)].restore == "local"


def test_a_restore_cut_short_is_never_taken_for_the_base(tmp_path: Path) -> None:
    blobs = f"file://{tmp_path / 'blobs'}"
    here, there, reports = tmp_path / "a", tmp_path / "b", Collected()
    first = plan(here, blobs, 1, TaskBase(), reports)
    count(first, [b"k"] * 5)
    base = next_base(first, reports)
    # a crash during a restore on another disk: the claim was removed before it began
    (task_dir(there, TASK) / "live").mkdir(parents=True)
    (task_dir(there, TASK) / BASE_FILE).write_text(DIRTY)
    assert held_base(there, TASK) is None
    moved = plan(there, blobs, 2, base, reports)
    assert count(moved, [b"k"]) == {b"k": 6}


def test_a_task_whose_code_never_opens_its_state_reports_nothing(tmp_path: Path) -> None:
    reports = Collected()
    quiet = plan(tmp_path / "a", f"file://{tmp_path / 'blobs'}", 1, TaskBase(), reports)
    with executor_task_state(quiet, TASK):
        pass
    assert reports.value == {}
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").rglob("live"))


def test_a_tasks_first_base_comes_from_its_resolved_checkpoint() -> None:
    marker = {"stateCheckpointMarkers": {"blob": {"state": "indexes/t/1-0.json"}}}
    own = {"checkpointId": "1-0", **marker}
    assert base_of(TASK, {}) == TaskBase()  # nothing committed: empty
    assert base_of(TASK, own) == TaskBase("1-0", "indexes/t/1-0.json",
                                          committed_marker="indexes/t/1-0.json")
    # --stateful coordinators name the sources: the task's own whole snapshot ...
    whole = {"taskName": TASK, "checkpointId": "2-0", **marker, "elasticityFactor": 2,
             "keyBuckets": [1], "nullKeys": False}
    base = base_of(TASK, {"stateSources": [whole]})
    assert (base.checkpoint_id, base.marker, base.sources) == ("2-0", "indexes/t/1-0.json", ())
    # ... or other tasks' parts to compose (a split's child), or none at all
    parent = {**whole, "taskName": "Partition 0", "elasticityFactor": 1, "keyBuckets": [0]}
    composed = base_of(TASK, {"stateSources": [parent]})
    assert composed.sources == (parent,) and composed.key.startswith("composed-")
    assert composed.key == base_of(TASK, {"stateSources": [dict(parent)]}).key  # stable
    assert base_of(TASK, {"stateSources": []}) == TaskBase()
