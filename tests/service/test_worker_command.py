"""``coxswain worker``'s start-up checks that need no Spark."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from service.commands.worker import hold_state_dir


def test_two_workers_on_one_state_dir_the_second_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "coxswain-state"
    first = hold_state_dir(state)
    with pytest.raises(SystemExit) as refused:
        hold_state_dir(state)
    assert f"another worker (pid {os.getpid()})" in str(refused.value)
    assert "its own --state-dir" in str(refused.value)
    assert hold_state_dir(tmp_path / "other-state") is not None  # another dir: fine
    first.release()
    hold_state_dir(state).release()  # free again once the first is gone
