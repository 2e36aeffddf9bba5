"""The batch boundary: where a worker's running tasks change.

A batch holds the boundary while it runs. A change asked for meanwhile (tasks handed
over, tasks added) is applied by that batch itself as it ends, and the source plan
written, before the query plans its next batch: Spark asks the source for the next
batch's offsets only after ``foreachBatch`` returns, so that batch reads what the change
says. (A change applied by the control thread once the lock is free would race Spark's
next planning, and lose it now and then: the gained tasks would wait one more batch.) A
change asked for between batches is applied at once by the thread asking.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Change:
    apply: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class BatchBoundary:
    """Serializes batches and changes; ``publish`` makes the source read the running
    tasks as they are after the changes applied (called once per set of changes)."""

    def __init__(self, publish: Callable[[], None]) -> None:
        self._publish = publish
        self._lock = threading.Lock()  # a batch running, or changes being applied
        self._guard = threading.Lock()  # the queue
        self._pending: list[_Change] = []

    @property
    def waiting(self) -> int:
        """Changes waiting for the batch in flight to end."""
        with self._guard:
            return len(self._pending)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Hold the boundary for a batch; the changes asked for meanwhile are applied
        when it ends."""
        with self._lock:
            try:
                yield
            finally:
                self._apply()

    def change(self, apply: Callable[[], Any],
               queued: Callable[[], None] | None = None) -> Any:
        """Run ``apply`` at the next batch boundary (now, between batches) and publish
        the result; return what ``apply`` returned, or raise what it raised. ``queued``
        runs once the change is queued, before it waits (a batch starting after that
        sees it in :attr:`waiting`)."""
        item = _Change(apply)
        with self._guard:
            self._pending.append(item)
        if queued is not None:
            queued()
        while not item.done.is_set():
            # a batch in flight applies it as it ends; between batches we do
            if self._lock.acquire(timeout=0.05):
                try:
                    self._apply()
                finally:
                    self._lock.release()
        if item.error is not None:
            raise item.error
        return item.result

    def offer(self, apply: Callable[[], Any]) -> None:
        """Run ``apply`` at the next batch boundary without waiting for it: now when no
        batch holds the boundary, else as the batch in flight ends (or, when it ended
        just as this was queued, the next one). For changes nothing waits on."""
        with self._guard:
            self._pending.append(_Change(apply))
        if self._lock.acquire(blocking=False):
            try:
                self._apply()
            finally:
                self._lock.release()

    def queue(self, apply: Callable[[], Any]) -> None:
        """Run ``apply`` with the changes the batch in flight applies as it ends (asked by
        that batch itself, which must not wait for its own end)."""
        with self._guard:
            self._pending.append(_Change(apply))

    def _apply(self) -> None:
        """Apply the queued changes and publish once (holding ``_lock``)."""
        with self._guard:
            pending, self._pending = self._pending, []
        if not pending:
            return
        for c in pending:
            try:
                c.result = c.apply()
            except BaseException as e:  # handed to the thread that asked for it
                c.error = e
        try:
            self._publish()
        except BaseException as e:
            for c in pending:
                c.error = c.error or e
        for c in pending:
            c.done.set()
