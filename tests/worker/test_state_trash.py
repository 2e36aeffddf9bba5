"""A task folder discarded after a split leaves its place at once, and its files soon;
what a crash left in the trash goes when the next worker opens the state dir."""

from __future__ import annotations

import time
from pathlib import Path

from tests.worker.test_state_compose import counts, run_batch
from worker.state.snapshot import claim_task_dir, held_tasks, task_dir
from worker.state.tasks import StateConfig, TaskStates
from worker.state.trash import TRASH, Trash


def _filled(state_dir: Path, task: str, files: int) -> Path:
    folder = claim_task_dir(state_dir, task)
    (folder / "snapshots" / "1-0").mkdir(parents=True)
    for i in range(files):
        (folder / "snapshots" / "1-0" / f"{i:06d}.sst").write_bytes(b"x" * 100)
    return folder


def _emptied(root: Path, limit_s: float = 30.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if not any(root.iterdir()):
            return True
        time.sleep(0.01)
    return False


def test_a_discarded_folder_leaves_its_place_at_once_and_the_disk_soon(tmp_path: Path
                                                                       ) -> None:
    folder = _filled(tmp_path, "Partition 0", 200)
    kept = _filled(tmp_path, "Partition 0_0_2", 3)
    Trash(tmp_path).discard(folder)
    assert not folder.exists()
    assert held_tasks(tmp_path) == ["Partition 0_0_2"]  # the trash holds no task
    assert _emptied(tmp_path / TRASH)
    assert kept.is_dir() and len(list(kept.rglob("*.sst"))) == 3
    Trash(tmp_path).discard(folder)  # gone already: nothing to do


def test_what_a_crash_left_in_the_trash_goes_when_the_state_dir_is_opened_again(
        tmp_path: Path) -> None:
    left = _filled(tmp_path / TRASH, "Partition 1", 50)  # renamed, never deleted
    assert left.is_dir()
    Trash(tmp_path)
    assert _emptied(tmp_path / TRASH)
    assert held_tasks(tmp_path) == []


def test_a_commit_moves_the_tasks_older_snapshots_to_the_trash(tmp_path: Path) -> None:
    """After each commit the task's older snapshots leave their place at once (no later
    commit can name them) and the disk soon, off the batch's path."""
    states = TaskStates(StateConfig(tmp_path / "a", f"file://{tmp_path / 'blobs'}", None))
    states.restore({"P": {"stateSources": []}})
    keys: list[bytes | None] = [f"k{i}".encode() for i in range(20)]
    run_batch(states, "P", "1000-1", keys, 20, 0)
    run_batch(states, "P", "1000-2", keys, 40, 0)
    held = sorted(p.name for p in (task_dir(states.state_dir, "P") / "snapshots").iterdir())
    assert held == ["1000-2", "1000-2.index.json"]
    assert _emptied(states.state_dir / TRASH)
    assert counts(states, "P") == dict.fromkeys(keys, 2)
