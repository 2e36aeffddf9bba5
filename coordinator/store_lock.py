"""One embedded coordinator per SQLite store: an exclusive lock on a file beside the
database, held for the life of the process.

Two ``coxswain serve`` on one data dir would both act as leader (each refuses the other's
publications, fences differently, and never sees the other's barriers complete). The lock
is ``flock``: the kernel drops it when the process exits, also on kill -9, so a crashed
coordinator never blocks its own restart.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class StoreLocked(Exception):
    """Another process holds the store's lock."""


class StoreLock:
    """The lock of the store at ``database``; :meth:`acquire` or raise ``StoreLocked``."""

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".lock")
        self._fd: int | None = None

    def acquire(self) -> StoreLock:
        """Take the lock without waiting; raise ``StoreLocked`` naming the holder."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 256, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StoreLocked(
                f"another coordinator (pid {holder}) serves the store {self.path.parent}: "
                "one embedded coordinator per data dir (stop it, use another --data-dir, or "
                "run replicas with --zk for high availability)") from None
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


def sqlite_database(url: str) -> Path | None:
    """The database file of a SQLite URL, or None (another database, or in memory)."""
    if not url.startswith("sqlite") or "///" not in url:
        return None
    path = url.split("///", 1)[1].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)
