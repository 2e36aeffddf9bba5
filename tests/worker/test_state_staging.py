"""Copies of a split parent's last snapshot linked while its last commit is under way
(``worker.state.staging``): the children's compositions take them, a copy of another
folder than the one the checkpoints name is never used, and what a crash left is
emptied; on real RocksDB stores and a folder blob store."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from grouping.key_bucket import key_bucket
from grouping.key_hash import KeyHash
from worker.runtime.handover import split_parents
from worker.state.snapshot import index_path, snapshot_dir, task_dir
from worker.state.staging import STAGED, Staging
from worker.state.store import TaskStore
from worker.state.tasks import StateConfig, TaskStates, new_checkpoint_id
from worker.state.trash import Trash

KEYS = [f"customer-{i}".encode() for i in range(200)]
MARK = "STAGED-HERE"  # a file only the staged copies hold


def _batch(states: TaskStates, checkpoint_id: str, keys: list[bytes]) -> dict[str, Any]:
    """One batch of counting on P, snapshotted under ``checkpoint_id`` and committed;
    P as a stateSources entry names it."""
    with TaskStore(task_dir(states.state_dir, "P") / "live", KeyHash.XXHASH64) as store:
        for k in keys:
            store.set(k, "n", store.get(k, "n", 0) + 1)
        store.commit()
        store.snapshot(snapshot_dir(states.state_dir, "P", checkpoint_id))
    body = states.back_up(checkpoint_id, {"P": {"inputOffsets": []}})
    states.committed(body)
    return {"taskName": "P", "checkpointId": body["P"]["checkpointId"],
            "stateCheckpointMarkers": body["P"]["stateCheckpointMarkers"]}


def _children(parent: dict[str, Any]) -> dict[str, Any]:
    return {f"C{c}": {"inputOffsets": [], "stateSources": [{
        **parent, "elasticityFactor": 2, "keyBuckets": [c], "nullKeys": c == 0,
        "keyHash": "xxhash64"}]} for c in (0, 1)}


def _counts(states: TaskStates, task: str) -> dict[bytes | None, int]:
    with TaskStore(task_dir(states.state_dir, task) / "live") as store:
        return {store.split_key(k)[0]: int(v[1:]) for k, v in store.entries()}


def _staged(states: TaskStates) -> list[Path]:
    root = states.state_dir / STAGED
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def _wait_staged(states: TaskStates, n: int) -> list[Path]:
    deadline = time.monotonic() + 10
    while len(found := [p for p in _staged(states) if not p.name.endswith(".partial")]) < n:
        assert time.monotonic() < deadline, found
        time.sleep(0.01)
    return found


def test_a_splits_children_take_the_copies_staged_during_the_parents_commit(
        tmp_path: Path) -> None:
    states = TaskStates(StateConfig(tmp_path / "a", f"file://{tmp_path / 'blobs'}"))
    states.restore({"P": {"stateSources": []}})
    parent = _batch(states, "1000-1", KEYS)
    states.stage("P", 2)  # two children: a live store each
    for copy in _wait_staged(states, 2):
        (copy / MARK).write_text("")
    states.restore(_children(parent))
    assert _staged(states) == []  # both taken
    # the children's first snapshots are linked once they run (from the parent's
    # folder, not a staged copy): a commit of a child that wrote nothing yet names it
    body = states.back_up(new_checkpoint_id(), {f"C{c}": {"inputOffsets": []} for c in (0, 1)})
    for c in (0, 1):
        composed = snapshot_dir(states.state_dir, f"C{c}", body[f"C{c}"]["checkpointId"])
        assert composed.is_dir() and index_path(composed).exists()
        assert not (composed / MARK).exists()
        assert (task_dir(states.state_dir, f"C{c}") / "live" / MARK).exists()
        assert _counts(states, f"C{c}") == {
            k: 1 for k in KEYS if key_bucket(k, 0, 2, KeyHash.XXHASH64) == c}


def test_a_composition_source_is_a_lost_task_whose_partitions_new_tasks_read() -> None:
    p0, p1 = {("t", 0)}, {("t", 1)}
    # 1 -> 2 on this processor: two children, a live store each (their snapshots are
    # linked once they run)
    assert split_parents({"A": p0}, {"A"}, [p0, p0]) == {"A": 2}
    # a child moved here, its sibling elsewhere
    assert split_parents({"A": p0}, {"A"}, [p0]) == {}
    # 2 -> 4 of two partitions: each parent's children
    assert split_parents({"A": p0, "B": p1}, {"A", "B"}, [p0, p0, p1, p1]) == {"A": 2, "B": 2}
    # a merge 2 -> 1: each child's snapshot once (the merged store's root, a part)
    assert split_parents({"A": p0, "B": p0}, {"A", "B"}, [p0]) == {"A": 1, "B": 1}
    # 4 -> 2 over one partition: each of the four once
    assert split_parents({k: p0 for k in "ABCD"}, set("ABCD"), [p0, p0]) == {
        k: 1 for k in "ABCD"}
    # a task that moved away: nothing staged
    assert split_parents({"A": p0}, {"A"}, [p1]) == {}
    # factor 2 -> 4 over one partition: two parents, four children
    assert split_parents({"A": p0, "B": p0}, {"A", "B"}, [p0] * 4) == {"A": 2, "B": 2}


def test_copies_staged_from_a_folder_rebuilt_since_are_never_used(tmp_path: Path) -> None:
    """The parent's snapshot folder lost a file before its copies were staged: the
    composition finds it unlike its index and downloads it again, and the children are
    made from the rebuilt folder, not from the copies (which lack the file)."""
    states = TaskStates(StateConfig(tmp_path / "a", f"file://{tmp_path / 'blobs'}"))
    states.restore({"P": {"stateSources": []}})
    parent = _batch(states, "1000-1", KEYS)
    folder = snapshot_dir(states.state_dir, "P", "1000-1")
    next(folder.glob("*.sst")).unlink()
    states.stage("P", 4)
    _wait_staged(states, 4)
    states.restore(_children(parent))
    for c in (0, 1):
        assert states.restores[f"C{c}"]["files"] >= (1 if c == 0 else 0)
        assert _counts(states, f"C{c}") == {
            k: 1 for k in KEYS if key_bucket(k, 0, 2, KeyHash.XXHASH64) == c}


def test_copies_nobody_takes_in_time_are_discarded(tmp_path: Path) -> None:
    """A wrong guess (the new tasks read the parent's partitions but are not its
    children) leaves copies nobody asks for: they go once ``stale_s`` has passed, so
    they never keep the parent's files on disk; a staging again in between keeps them."""
    source = tmp_path / "snapshot"
    with TaskStore(tmp_path / "live", KeyHash.XXHASH64) as store:
        store.set(KEYS[0], "n", 1)
        store.commit()
        store.snapshot(source)
    staging = Staging(tmp_path / "state", Trash(tmp_path / "state"), stale_s=0.3)
    staging.stage(source, 2)
    root = tmp_path / "state" / STAGED

    def copies() -> int:
        return sum(1 for p in root.iterdir() if not p.name.endswith(".partial")) \
            if root.is_dir() else 0

    deadline = time.monotonic() + 10
    while copies() < 2:  # linked (the expiry is later)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    while copies():  # then gone
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert staging.take(source) is None
    staging.stage(source, 1)
    copy = staging.take(source)  # taken at once: the timer finds nothing left
    assert copy is not None and (copy / "CURRENT").exists()
    time.sleep(0.5)
    assert copy.exists()


def test_a_merges_task_takes_the_copies_staged_during_its_childrens_commits(
        tmp_path: Path) -> None:
    """A factor merge: a copy of each child's last snapshot staged beside their last
    commit becomes the merged store's root and its part (renamed into place, not linked
    again)."""
    states = TaskStates(StateConfig(tmp_path / "a", f"file://{tmp_path / 'blobs'}"))
    states.restore({"P": {"stateSources": []}})
    parent = _batch(states, "1000-1", KEYS)
    states.restore(_children(parent))
    held = {}
    for c in (0, 1):
        task = f"C{c}"
        with TaskStore(task_dir(states.state_dir, task) / "live", KeyHash.XXHASH64) as store:
            for k in KEYS[:20]:
                if key_bucket(k, 0, 2, KeyHash.XXHASH64) == c:
                    store.set(k, "n", store.get(k, "n", 0) + 1)
            store.commit()
            checkpoint_id = new_checkpoint_id()  # (after the composed snapshot's)
            store.snapshot(snapshot_dir(states.state_dir, task, checkpoint_id))
        body = states.back_up(checkpoint_id, {task: {"inputOffsets": []}})
        states.committed(body)
        held[c] = {"taskName": task, "checkpointId": body[task]["checkpointId"],
                   "stateCheckpointMarkers": body[task]["stateCheckpointMarkers"]}
        states.stage(task, 1)
    for copy in _wait_staged(states, 2):
        (copy / MARK).write_text("")
    states.restore({"M": {"inputOffsets": [], "stateSources": [{
        **held[c], "elasticityFactor": 2, "keyBuckets": [c], "nullKeys": c == 0,
        "keyHash": "xxhash64"} for c in (0, 1)]}})
    assert _staged(states) == []  # both taken
    live = task_dir(states.state_dir, "M") / "live"
    assert (live / MARK).exists() and (live / "part-1" / MARK).exists()
    assert _counts(states, "M") == {k: 2 if k in KEYS[:20] else 1 for k in KEYS}
