"""Standby copies kept fresh from committed snapshots (no input read), and state lags as
KIP-441 defines them: how many offsets a processor's copy is behind the task's latest
committed checkpoint. Two processors' state dirs, one real blob store (a folder); the
coordinator's answers to GET /checkpoints are given as the data it would return."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from worker.state.restore import open_live
from worker.state.snapshot import snapshot_dir, task_dir
from worker.state.tasks import StateConfig, TaskStates

TASK = "Partition 0_1_2"
SSP = {"system": "kafka", "stream": "orders", "partition": 0, "keyBucket": 1}


def offsets(n: int, ssp: dict[str, Any] = SSP) -> list[dict[str, Any]]:
    return [{"ssp": ssp, "offset": str(n)}]


def commit_batch(states: TaskStates, checkpoint_id: str, start: int, end: int,
                 offset: int, ssp: dict[str, Any] = SSP) -> dict[str, Any]:
    """What an active processor does for one batch; returns the committed checkpoint as
    GET /checkpoints would then serve it."""
    with open_live(states.state_dir, TASK,
                   _latest(states.state_dir)) as store:
        for i in range(start, end):
            store.set(f"k{i}", "count", i)
            store.set_bytes(f"k{i}", "pad", bytes(500))
        store.commit()
        store.snapshot(snapshot_dir(states.state_dir, TASK, checkpoint_id))
    body = states.back_up(checkpoint_id, {TASK: {"inputOffsets": offsets(offset, ssp)}})
    states.committed(body)
    return {"checkpointId": body[TASK]["checkpointId"], "inputOffsets": offsets(offset, ssp),
            "stateCheckpointMarkers": body[TASK]["stateCheckpointMarkers"]}


def _latest(state_dir: Path) -> Path | None:
    root = task_dir(state_dir, TASK) / "snapshots"
    found = sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []
    return found[-1] if found else None


def test_a_standby_fetches_committed_snapshots_and_reports_its_lag(tmp_path: Path) -> None:
    blobs = f"file://{tmp_path / 'blobs'}"
    active = TaskStates(StateConfig(tmp_path / "a", blobs))
    standby = TaskStates(StateConfig(tmp_path / "b", blobs))
    committed = commit_batch(active, "1000-1", 0, 200, 100)
    read = lambda names: {TASK: committed}  # noqa: E731 (what the coordinator answers)

    assert active.refresh([TASK], [], read) == {TASK: 0}
    assert standby.refresh([], [TASK], read) == {TASK: 0}  # fetched: caught up
    assert standby.refresh([], [TASK], read, {TASK}) == {TASK: 0}

    committed = commit_batch(active, "2000-2", 200, 400, 250)
    # a copy left on disk (not a standby any more) is not refreshed: 150 offsets behind
    assert standby.refresh([], [], read) == {TASK: 150}
    # as a standby it fetches the new snapshot, only the files it lacks, and keeps only it
    assert standby.refresh([], [TASK], read) == {TASK: 0}
    kept = sorted(p.name for p in (task_dir(tmp_path / "b", TASK) / "snapshots").iterdir()
                  if p.is_dir())
    assert kept == ["2000-2"]
    # it becomes active: the committed snapshot is here, nothing to download
    standby.restore({TASK: committed})
    assert standby.restores[TASK]["source"] == "local"
    assert standby.restores[TASK]["bytes"] == 0
    # tasks the latest job model does not have are not asked about
    assert standby.refresh([], [TASK], read, set()) == {}

    def unknown(names: list[str]) -> dict[str, Any]:  # the coordinator's 404 unknown_task
        if "Partition 9" in names:
            raise LookupError("unknown_task")
        return {TASK: committed}

    (tmp_path / "b" / "Partition_209").mkdir()
    (tmp_path / "b" / "Partition_209" / "task-name").write_text("Partition 9")
    assert standby.refresh([], [TASK], unknown) == {TASK: 0}  # left the model: skipped


def test_a_kinesis_tasks_lag_is_milliseconds_of_processing_not_sequence_numbers(
    tmp_path: Path,
) -> None:
    """Kinesis sequence numbers of adjacent records differ by more than 2^63: a copy's
    lag is the time between its snapshot and the committed one (checkpoint ids are the
    snapshots' times), bounded and comparable across processors."""
    shard = {"system": "kinesis", "stream": "orders", "partition": 0, "keyBucket": 1}
    blobs = f"file://{tmp_path / 'blobs'}"
    active = TaskStates(StateConfig(tmp_path / "a", blobs))
    standby = TaskStates(StateConfig(tmp_path / "b", blobs))
    first = 49_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000
    committed = commit_batch(active, "1700000000000-1", 0, 50, first, shard)
    read = lambda names: {TASK: committed}  # noqa: E731
    assert standby.refresh([], [TASK], read) == {TASK: 0}
    # 2.5 s of processing later, some 10^40 sequence numbers on
    committed = commit_batch(active, "1700000002500-7", 50, 90, first + 10**40, shard)
    assert standby.refresh([], [], read) == {TASK: 2500}  # left on disk: not fetched
    assert standby.refresh([], [TASK], read) == {TASK: 0}


def test_a_snapshot_whose_commit_never_happened_is_never_named_by_a_later_one(
        tmp_path: Path) -> None:
    """A fenced owner's uncommitted batch left its snapshot here; the task restarts here
    from the committed checkpoint, and a batch in which it opens no store commits: that
    commit names no snapshot (the state stays the committed one), never the uncommitted
    batch's, whose counts the next batches would count again."""
    states = TaskStates(StateConfig(tmp_path / "a", f"file://{tmp_path / 'blobs'}"))
    committed = commit_batch(states, "1000-1", 0, 10, 100)
    # the next batch counted records past offset 100 and was backed up, but its commit
    # never happened (its transaction aborted: the owner was fenced)
    with open_live(states.state_dir, TASK, _latest(states.state_dir)) as store:
        store.set("k1", "count", 99)
        store.commit()
        store.snapshot(snapshot_dir(states.state_dir, TASK, "2000-2"))
    states.back_up("2000-2", {TASK: {"inputOffsets": offsets(150)}})

    states.restore({TASK: committed})  # the task again, from what was committed
    body = states.back_up("3000-3", {TASK: {"inputOffsets": offsets(120)}})
    assert "stateCheckpointMarkers" not in body[TASK]
    assert not snapshot_dir(states.state_dir, TASK, "2000-2").exists()
    with open_live(states.state_dir, TASK, _latest(states.state_dir)) as store:
        assert store.get("k1", "count") == 1
