"""One embedded coordinator per SQLite store: an exclusive lock on a file beside the
database, held for the life of the process.

Two ``coxswain serve`` on one data dir would both act as leader (each refuses the other's
publications, fences differently, and never sees the other's barriers complete). The lock
is ``flock``: the kernel drops it when the process exits, also on kill -9, so a crashed
coordinator never blocks its own restart.
"""

from __future__ import annotations

from pathlib import Path

from common.file_lock import FileLock, FileLocked


class StoreLocked(Exception):
    """Another process holds the store's lock."""


class StoreLock:
    """The lock of the store at ``database``; :meth:`acquire` or raise ``StoreLocked``."""

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".lock")
        self._lock = FileLock(self.path)

    def acquire(self) -> StoreLock:
        """Take the lock without waiting; raise ``StoreLocked`` naming the holder."""
        try:
            self._lock.acquire()
        except FileLocked as e:
            raise StoreLocked(
                f"another coordinator (pid {e.holder}) serves the store {self.path.parent}: "
                "one embedded coordinator per data dir (stop it, use another --data-dir, or "
                "run replicas with --zk for high availability)") from None
        return self

    def release(self) -> None:
        """Give the lock up (also done by the kernel when the process exits)."""
        self._lock.release()


def sqlite_database(url: str) -> Path | None:
    """The database file of a SQLite URL, or None (another database, or in memory)."""
    if not url.startswith("sqlite") or "///" not in url:
        return None
    path = url.split("///", 1)[1].split("?", 1)[0]
    return None if path in ("", ":memory:") else Path(path)
