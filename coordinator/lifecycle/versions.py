"""This replica's view of the published job models, and the long polls that wait on it.

The latest version (and the store's pointer to it), its barrier, and the active version
(the newest whose barrier completed). The lifecycle changes them on the event loop: under
its lock, except for acks that only add to a pending barrier (``barrier_keeper``). A
long poll wakes only when what it waits for changed: the latest version, or its barrier's
state.
"""

from __future__ import annotations

import asyncio

from coordinator.barrier import Barrier, BarrierState
from coordinator.clock import Clock
from coordinator.job_models import JobModelRepository
from coordinator.lifecycle.waiters import ChangeSignal
from coordinator.model_cache import ModelCache
from grouping.model import JobModel


class Versions:
    """The latest, its barrier and the active job model of this replica."""

    def __init__(self, models: JobModelRepository, clock: Clock) -> None:
        self._models = models
        self._signal = ChangeSignal(clock)  # parked long polls
        self._cache = ModelCache()
        self.latest: JobModel | None = None
        self.pointer: int | None = None  # the store's version pointer (compare-and-set)
        self.barrier: Barrier | None = None  # the latest version's
        self.active: JobModel | None = None

    def active_before(self, version: int) -> bool:
        """Whether no version is active yet, or an older one than ``version``."""
        return self.active is None or self.active.version < version

    def keep(self, model: JobModel) -> None:
        """Keep ``model`` among the recently used (late commits and acks name them)."""
        self._cache.put(model)

    async def model(self, version: int) -> JobModel | None:
        """The job model of ``version`` (cached), or None."""
        if self.latest is not None and self.latest.version == version:
            return self.latest
        cached = self._cache.get(version)
        if cached is not None:
            return cached
        found = await asyncio.to_thread(self._models.load, version)
        if found is not None:
            self._cache.put(found)
        return found

    async def wait_for_change(
        self, since: int | None, barrier: BarrierState | None, timeout_s: float
    ) -> bool:
        """Wait until a version newer than ``since`` exists (or, when ``barrier`` is given,
        until version ``since``'s barrier left that state). False on timeout."""
        return await self._signal.wait(lambda: self._changed_since(since, barrier), timeout_s)

    def _changed_since(self, since: int | None, barrier: BarrierState | None) -> bool:
        latest = self.latest
        if latest is None:
            return False
        if since is None or latest.version > since:
            return True
        current = self.barrier
        return (barrier is not None and latest.version == since and current is not None
                and current.state is not barrier)

    def notify(self) -> None:
        """Wake the long polls if what they wait for changed: the latest version or its
        barrier's state."""
        latest, barrier = self.latest, self.barrier
        self._signal.notify((None if latest is None else latest.version,
                             None if barrier is None else (barrier.version, barrier.state)))


def later(read: Barrier, current: Barrier | None) -> bool:
    """Whether a barrier read from the store is later than the one this replica holds
    (another version, or the same one further along: ended, or more acks)."""
    if current is None or read.version != current.version:
        return True
    if current.state is not BarrierState.PENDING:
        return False
    return read.state is not BarrierState.PENDING or len(read.acked) > len(current.acked)
