"""Task folders removed off a split's or merge's pause: moved aside at once, deleted later.

When a split's children are composed, their parent's folder (its live store and
snapshots, ~3 000 hard links at 4 GB of state) is no longer needed; deleting it before the
children start put ~40-80 ms of unlinks on the pause (bench/RESULTS.md, #52). It is
renamed into ``{state dir}/.trash/`` instead (one atomic rename: the task's folder is gone
from its place, as a deletion would leave it) and deleted by a background thread. A crash
leaves it in the trash, where the next worker on the state dir deletes it; the trash's
folders are nested one level down, so ``snapshot.held_tasks`` never takes one for a task
held here.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

TRASH = ".trash"


class Trash:
    """The trash of one state dir."""

    def __init__(self, state_dir: Path) -> None:
        self._root = state_dir / TRASH
        if self._root.is_dir():  # what a crashed worker left
            self._delete_later(list(self._root.iterdir()))

    def discard(self, folder: Path) -> None:
        """Remove ``folder`` from its place now, and its files soon."""
        self._root.mkdir(parents=True, exist_ok=True)
        moved = self._root / f"{folder.name}.{uuid.uuid4().hex[:12]}"
        try:
            folder.rename(moved)
        except FileNotFoundError:
            return
        self._delete_later([moved])

    @staticmethod
    def _delete_later(folders: Sequence[Path]) -> None:
        if folders:
            threading.Thread(target=_delete, args=(folders,), name="state-trash",
                             daemon=True).start()


def _delete(folders: Sequence[Path]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
