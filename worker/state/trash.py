"""Task folders and snapshots removed off the pause and the batches: moved aside at once,
deleted later.

When a split's children are composed, their parent's folder (its live store and
snapshots, ~2 000 hard links at 4 GB of state) is no longer needed, and after each commit
the task's previous snapshot (~1 000 at 4 GB: 10-15 ms of unlinks a batch); deleting them
there put the unlinks on the pause and on every commit, which a handover waits for
(bench/RESULTS.md, #52). Each is
renamed into ``{state dir}/.trash/`` instead (one atomic rename: the task's folder is gone
from its place, as a deletion would leave it) and deleted by a background thread. A crash
leaves it in the trash, where the next worker on the state dir deletes it; the trash's
folders are nested one level down, so ``snapshot.held_tasks`` never takes one for a task
held here.
"""

from __future__ import annotations

import queue
import shutil
import threading
import uuid
from pathlib import Path

TRASH = ".trash"


class Trash:
    """The trash of one state dir, emptied by one background thread (started on first
    use: deletions run one at a time, off the batches' path)."""

    def __init__(self, state_dir: Path) -> None:
        self._root = state_dir / TRASH
        self._pending: queue.SimpleQueue[Path] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._emptier: threading.Thread | None = None
        if self._root.is_dir():  # what a crashed worker left
            for folder in self._root.iterdir():
                self._delete_later(folder)

    def discard(self, folder: Path) -> None:
        """Remove ``folder`` from its place now, and its files soon."""
        self._root.mkdir(parents=True, exist_ok=True)
        moved = self._root / f"{folder.name}.{uuid.uuid4().hex[:12]}"
        try:
            folder.rename(moved)
        except FileNotFoundError:
            return
        self._delete_later(moved)

    def _delete_later(self, folder: Path) -> None:
        self._pending.put(folder)
        with self._lock:
            if self._emptier is None:
                self._emptier = threading.Thread(target=self._empty, name="state-trash",
                                                 daemon=True)
                self._emptier.start()

    def _empty(self) -> None:
        while True:
            folder = self._pending.get()
            if folder.is_dir():
                shutil.rmtree(folder, ignore_errors=True)
            else:
                folder.unlink(missing_ok=True)
