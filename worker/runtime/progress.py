"""The worker's progress in its log: one INFO line per interval, one DEBUG line per batch.

A worker runs micro-batches back to back, several a second when its input is light: a
line per batch at INFO buried everything else (a first job's log was thousands of batch
lines an hour). At INFO a line sums up the batches of each interval (records, the tasks
that had records, the batches' time, the backlog at the last heartbeat); the first batch
and a batch longer than the interval still get a line of their own. Every batch's own
line is at DEBUG (``--log-level INFO,coxswain.worker.progress=DEBUG``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

INTERVAL_S = 10.0

log = logging.getLogger("coxswain.worker")
per_batch = logging.getLogger("coxswain.worker.progress")


@dataclass
class _Sum:
    first: int = -1
    last: int = -1
    batches: int = 0
    records: int = 0
    tasks_read: int = 0  # the most tasks with records in one batch
    tasks: int = 0  # the most tasks running at a batch
    seconds: float = 0.0
    in_driver: int = 0  # batches the driver ran itself (``worker.runtime.driver_batches``)


class ProgressLog:
    """Takes each batch's figures; logs them as the module says."""

    def __init__(self, interval_s: float = INTERVAL_S,
                 lag: Callable[[], int | None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self._lag = lag
        self._clock = clock
        self._since: float | None = None  # the last INFO line's time
        self._sum = _Sum()

    def batch(self, batch_id: int, records: int, tasks_read: int, tasks: int,
              seconds: float, limit: int | None, cut_short: bool,
              in_driver: bool = False) -> None:
        """One batch done: ``records`` read for ``tasks_read`` of the ``tasks`` running,
        in ``seconds`` (``in_driver``: by the driver itself, no Spark job); ``limit`` the
        next batch's record limit (None: none)."""
        nxt = f", next at most {limit} records" if limit is not None else ""
        short = " (cut short)" if cut_short else ""
        where = " in the driver" if in_driver else ""
        per_batch.debug("batch %d: %d records for %d of %d tasks in %.2fs%s%s%s", batch_id,
                        records, tasks_read, tasks, seconds, where, nxt, short)
        s = self._sum
        if s.batches == 0:
            s.first = batch_id
        s.last = batch_id
        s.batches += 1
        s.records += records
        s.tasks_read = max(s.tasks_read, tasks_read)
        s.tasks = max(s.tasks, tasks)  # (a version change within: the most running)
        s.seconds += seconds
        s.in_driver += in_driver
        now = self._clock()
        if self._since is None or now - self._since >= self._interval_s:
            self.flush(nxt=nxt, short=short)

    def flush(self, nxt: str = "", short: str = "") -> None:
        """The line of the batches not logged yet, if any (a worker that stops says what
        it did last)."""
        s = self._sum
        if s.batches == 0:
            return
        tasks = s.tasks
        lag = self._lag()
        behind = f"; {lag} records behind" if lag is not None else ""
        if s.batches == 1:
            log.info("batch %d: %d records for %d of %d tasks in %.2fs%s%s%s%s", s.first,
                     s.records, s.tasks_read, tasks, s.seconds,
                     " in the driver" if s.in_driver else "", nxt, short, behind)
        else:
            driver = f" ({s.in_driver} in the driver)" if s.in_driver else ""
            log.info("batches %d-%d: %d records for up to %d of %d tasks in %d batches of "
                     "%.2fs on average%s%s%s", s.first, s.last, s.records, s.tasks_read,
                     tasks, s.batches, s.seconds / s.batches, driver, nxt, behind)
        self._since = self._clock()
        self._sum = _Sum()
