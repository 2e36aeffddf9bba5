"""An exclusive lock on a file for the life of a process (``flock``): the kernel drops it
when the process exits, also on kill -9, so a crashed holder never blocks its own
restart. The holder writes its pid into the file, for the message of the one refused."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class FileLocked(Exception):
    """Another process holds the lock; ``holder`` is its pid as it wrote it."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is locked by pid {holder}")
        self.path = path
        self.holder = holder


class FileLock:
    """The lock at ``path``: :meth:`acquire` or raise :class:`FileLocked`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> FileLock:
        """Take the lock without waiting."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise FileLocked(self.path, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Give the lock up (also done by the kernel when the process exits)."""
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
