"""Asynchronous commits (SAMZA-2591's shape): a batch's per-bucket next offsets are
snapshotted synchronously, then uploaded by a background thread while the next batch runs.

A commit still uploading when the next is due defers that next one (offsets being
monotonic, the newest covers every older one, state snapshots included) while within
``max_delay_s``; beyond it, processing waits. The deferred commit is never dropped: it is
uploaded when the one in flight ends, and :meth:`AsyncCommitter.flush` (a hand-over)
returns only once the newest commit is acknowledged, or the next owner would reprocess a
batch whose output this worker already wrote.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

log = logging.getLogger("coxswain.worker")

Upload = Callable[[int, dict[str, Any], "str | None"], int]


class AsyncCommitter:
    """Uploads commits in the background, at most one at a time, newest last."""

    def __init__(self, upload: Upload, max_delay_s: float) -> None:
        self._upload = upload
        self._max_delay_s = max_delay_s
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="commit")
        self._lock = threading.RLock()  # a done future runs its callback at once
        self._pending: Future[int] | None = None
        self._pending_since = 0.0
        # the newest commit not yet handed to the upload thread
        self._deferred: tuple[int, dict[str, Any], str | None] | None = None
        self.skipped = 0  # commits superseded by a newer one before their upload

    def submit(self, version: int, checkpoints: dict[str, Any],
               checkpoint_id: str | None = None) -> None:
        """Upload ``checkpoints``: now if no upload runs, else once it ends (replacing any
        commit already waiting); beyond the delay, wait for the one in flight first.
        Raises what a finished upload raised (``Fenced``)."""
        if not checkpoints:
            return
        with self._lock:
            pending = self._pending
            if pending is not None and not pending.done():
                if time.monotonic() - self._pending_since < self._max_delay_s:
                    if self._deferred is not None:
                        self.skipped += 1
                    self._deferred = (version, checkpoints, checkpoint_id)
                    return
                log.warning("commit delayed beyond %.0fs: processing waits for it",
                            self._max_delay_s)
        if pending is not None:
            pending.result()  # waits if overdue; surfaces Fenced from the previous upload
        with self._lock:
            if self._deferred is not None:
                self.skipped += 1  # this newer commit covers the deferred one
                self._deferred = None
            self._start(version, checkpoints, checkpoint_id)

    def _start(self, version: int, checkpoints: dict[str, Any],
               checkpoint_id: str | None) -> None:
        self._pending_since = time.monotonic()
        future = self._pool.submit(self._upload, version, checkpoints, checkpoint_id)
        self._pending = future
        future.add_done_callback(self._uploaded)

    def _uploaded(self, future: Future[int]) -> None:
        """Upload the deferred commit as soon as the previous upload succeeded."""
        if future.cancelled() or future.exception() is not None:
            return  # surfaced by the next submit or flush; the deferred one waits
        with self._lock:
            if self._pending is future and self._deferred is not None:
                deferred, self._deferred = self._deferred, None
                self._start(*deferred)

    def flush(self) -> None:
        """Wait until the newest commit is acknowledged (raises what an upload raised)."""
        while True:
            with self._lock:
                pending = self._pending
            if pending is None:
                return
            pending.result()
            with self._lock:
                if self._pending is pending:
                    if self._deferred is None:
                        return
                    # the callback has not run yet (or lost a race): upload it here
                    deferred, self._deferred = self._deferred, None
                    self._start(*deferred)

    def close(self) -> None:
        """Stop the upload thread."""
        self._pool.shutdown(wait=True)
