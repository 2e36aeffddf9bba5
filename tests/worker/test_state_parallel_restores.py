"""Restores of different tasks run side by side (issue #30): a survivor restoring a big
task's state must not make the small tasks it gains from a killed worker wait for it,
nor its standby refreshes. One real blob store (a folder); the big task's downloads are
held at a gate the test opens, so "side by side" is shown by order, not by timing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grouping.key_hash import KeyHash
from tests.worker.test_state_compose import KEYS, counts, offsets, run_batch, source
from worker.state.blobs import BlobStore, open_blob_store
from worker.state.locks import TaskFolderLocks
from worker.state.restore import open_live
from worker.state.snapshot import snapshot_dir, task_dir
from worker.state.tasks import StateConfig, TaskStates, restore_groups

BIG, SMALL = "Partition 0_0_2", "Partition 1_0_2"
WAIT_S = 60.0  # only a deadlock would take this long


class Gated:
    """The blob store, with downloads into ``task``'s folder held until ``gate`` opens."""

    def __init__(self, inner: BlobStore, folder: str) -> None:
        self._inner = inner
        self._folder = folder
        self.gate = threading.Event()
        self.held = threading.Event()  # a download of the task is waiting at the gate

    def put(self, key: str, data: bytes) -> None:
        self._inner.put(key, data)

    def put_file(self, key: str, path: Path) -> None:
        self._inner.put_file(key, path)

    def get(self, key: str) -> bytes:
        return self._inner.get(key)

    def get_file(self, key: str, path: Path) -> int:
        if self._folder in str(path):
            self.held.set()
            assert self.gate.wait(WAIT_S), "the gate was never opened"
        return self._inner.get_file(key, path)

    def exists(self, key: str) -> bool:
        return self._inner.exists(key)

    def list(self, prefix: str) -> Iterator[tuple[str, float]]:
        return self._inner.list(prefix)

    def delete(self, key: str) -> None:
        self._inner.delete(key)


def committed(states: TaskStates, task: str, keys: int) -> dict[str, Any]:
    """One committed batch of ``task`` with ``keys`` keys, as GET /checkpoints serves it."""
    offsets = [{"ssp": {"system": "kafka", "stream": "orders", "partition": 0,
                        "keyBucket": 0}, "offset": str(keys)}]
    with open_live(states.state_dir, task, None) as store:
        for i in range(keys):
            store.set_bytes(f"k{i}", "pad", bytes(1000))
        store.commit()
        store.snapshot(snapshot_dir(states.state_dir, task, "1000-1"))
    body = states.back_up("1000-1", {task: {"inputOffsets": offsets}})
    states.committed(body)
    return {"checkpointId": body[task]["checkpointId"], "inputOffsets": offsets,
            "stateCheckpointMarkers": body[task]["stateCheckpointMarkers"]}


def test_a_small_restore_is_not_held_up_by_a_big_one(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'blobs'}"
    active = TaskStates(StateConfig(tmp_path / "victim", url))
    checkpoints = {BIG: committed(active, BIG, 2000), SMALL: committed(active, SMALL, 10)}
    blobs = Gated(open_blob_store(url), task_dir(tmp_path / "survivor", BIG).name)
    survivor = TaskStates(StateConfig(tmp_path / "survivor", url), blobs)
    big = threading.Thread(target=survivor.restore, args=({BIG: checkpoints[BIG]},))
    big.start()
    try:
        assert blobs.held.wait(WAIT_S), "the big restore never downloaded"
        small = threading.Thread(target=survivor.restore,
                                 args=({SMALL: checkpoints[SMALL]}, {BIG}))
        small.start()
        small.join(WAIT_S)
        assert not small.is_alive(), "the small restore waited for the big one"
        assert survivor.restores[SMALL]["source"] == "remote"
        assert BIG not in survivor.restores  # still at the gate
        # a standby refresh of another task is not held up either
        read = lambda names: {SMALL: checkpoints[SMALL]}  # noqa: E731
        refreshed = threading.Thread(target=survivor.refresh, args=([BIG], [SMALL], read))
        refreshed.start()
        refreshed.join(WAIT_S)
        assert not refreshed.is_alive(), "the refresh waited for the big restore"
    finally:
        blobs.gate.set()
        big.join(WAIT_S)
    assert survivor.restores[BIG]["source"] == "remote"
    assert survivor.restores[BIG]["bytes"] > survivor.restores[SMALL]["bytes"]


def test_builds_of_one_folder_take_turns() -> None:
    locks = TaskFolderLocks()
    order: list[str] = []
    inside = threading.Event()

    def second() -> None:
        with locks.hold([SMALL, BIG]):  # another order of the same names: no deadlock
            order.append("second")

    with locks.hold([BIG]):
        other = threading.Thread(target=second)
        other.start()
        other.join(0.2)
        assert other.is_alive()  # waits for BIG's folder
        with locks.hold([BIG, SMALL]):  # reentrant for the holder
            inside.set()
        order.append("first")
    other.join(WAIT_S)
    assert order == ["first", "second"]
    assert inside.is_set()


def test_a_source_copy_restored_again_beside_a_composition_is_not_deleted(
    tmp_path: Path,
) -> None:
    """A composition deletes its source tasks' copies when it is done, unless a restore
    beside it made a source a task of this processor again meanwhile (the factor went
    back): its live store must survive. Order forced by a gate: the composition of C0
    from P, then Z held at the gate; P restored as a task of its own; Z let go."""
    url = f"file://{tmp_path / 'blobs'}"
    active = TaskStates(StateConfig(tmp_path / "a", url))
    active.restore({"P": {"stateSources": []}, "Z": {"stateSources": []}})
    parent = run_batch(active, "P", "1000-1", [*KEYS], 300, 0)
    z = run_batch(active, "Z", "1000-2", [*KEYS[:5]], 5, 0)
    blobs = Gated(open_blob_store(url), task_dir(tmp_path / "b", "Z").name)
    b = TaskStates(StateConfig(tmp_path / "b", url), blobs)
    child = {"inputOffsets": offsets(0, 300),
             "stateSources": [source(parent, 2, [0], True, KeyHash.XXHASH64)]}
    composing = threading.Thread(target=b.restore, args=(
        {"C0": child, "Z": {"stateSources": [z]}},))
    composing.start()
    try:
        assert blobs.held.wait(WAIT_S), "Z's restore never downloaded"
        b.restore({"P": {"stateSources": [parent]}}, {"C0", "Z"})  # P is a task again
    finally:
        blobs.gate.set()
        composing.join(WAIT_S)
    assert b.restores["C0"]["source"] == "composed"
    assert counts(b, "P") == {k: 1 for k in KEYS}  # its live store is still there
    assert counts(b, "Z") == {k: 1 for k in KEYS[:5]}


def test_tasks_restore_alone_unless_built_from_the_same_sources() -> None:
    def source(task: str) -> dict[str, Any]:
        return {"taskName": task, "checkpointId": "1-1", "elasticityFactor": 2,
                "keyBuckets": [0], "nullKeys": True}

    own = {"stateSources": [{"taskName": "A", "checkpointId": "1-1"}]}
    split = {"stateSources": [source("P")]}  # C0 and C1: both from P
    groups = restore_groups({
        "A": own, "B": {"stateSources": []}, "C0": split, "C1": split, "D": {},
        "M0": {"stateSources": [source("X0"), source("X1")]},  # merges: apart
        "M1": {"stateSources": [source("Y0"), source("Y1")]},
        # one shares X1 with M0, another Y0 with M1: all four in one group
        "N": {"stateSources": [source("X1"), source("Z")]},
        "O": {"stateSources": [source("Z"), source("Y0")]},
    })
    assert groups == [{"A"}, {"B"}, {"D"}, {"C0", "C1"}, {"M0", "M1", "N", "O"}]
    assert restore_groups({"M0": {"stateSources": [source("X0"), source("X1")]},
                           "M1": {"stateSources": [source("Y0"), source("Y1")]}}) \
        == [{"M0"}, {"M1"}]
    assert restore_groups({}) == []
