"""One lock per task folder: restores and standby refreshes of different tasks run side
by side, never two on the same folder.

A composition (a split child's or merged task's state) reads its source tasks' folders,
so it holds theirs too; locks are taken in name order, so two builds that share folders
never wait on each other in a cycle.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager


class TaskFolderLocks:
    """Reentrant locks by task name, made on first use."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.RLock] = {}

    def _of(self, task: str) -> threading.RLock:
        with self._guard:
            lock = self._locks.get(task)
            if lock is None:
                lock = self._locks[task] = threading.RLock()
            return lock

    @contextmanager
    def hold(self, tasks: Iterable[str]) -> Iterator[None]:
        """Hold the folders of ``tasks`` (in name order) for the block."""
        with ExitStack() as stack:
            for task in sorted(set(tasks)):
                stack.enter_context(self._of(task))
            yield
