"""Keeping the cyclic garbage collector off the job models.

A coordinator holds a few job models of 100k-200k task tuples each, with their indexes and
rendered JSON: millions of long-lived objects. Each full (oldest-generation) collection
walks all of them, 150-300 ms of the GIL, and collections came several times per
rebalance, right while a thousand processors waited for their answers and acks. The
models never form reference cycles (they are freed by reference counting alone when the
model cache drops them), so scanning them finds nothing.

So once a new job model is made and rendered, everything alive is moved out of the
collector's sight (``gc.freeze``). Objects that become cyclic garbage while frozen are
not collected until the heap is thawed: when the coordinator has published nothing for a
while (``thaw_after_s``), it thaws, collects once (one pause, outside any rebalance) and
freezes again; so it does at least every ``thaw_every_s`` under constant rebalances.

What is left in the collector's sight during a rebalance is mostly the request machinery
of a thousand parked long polls (coroutines, tasks, contexts: 150-200k objects, promoted
to the oldest generation while they wait), and the oldest generation was still collected
about twice per rebalance (around 100 ms each). While running, full collections come
after ``full_every`` young-generation collections instead of CPython's 10: the young
generations still collect what the requests leave, and the rare full collection the
cycles they leave in the oldest one.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("coxswain.service")


class FrozenHeap:
    """Freezes the heap after each new job model; thaws and collects once when idle."""

    def __init__(self, thaw_after_s: float = 60.0, thaw_every_s: float = 600.0,
                 full_every: int = 100,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._thaw_after_s = thaw_after_s
        self._thaw_every_s = thaw_every_s
        self._full_every = full_every
        self._monotonic = monotonic
        self._frozen_at: float | None = None  # None: nothing frozen since the last thaw
        self._thawed_at = monotonic()
        self._thresholds: tuple[int, int, int] | None = None
        self._task: asyncio.Task[None] | None = None

    def settled(self) -> None:
        """A new job model is made and rendered: freeze what is alive now."""
        gc.freeze()
        self._frozen_at = self._monotonic()

    @contextmanager
    def generating(self) -> Iterator[None]:
        """Around a job model's generation and rendering: the collector paused, and what
        is alive at the end frozen before it resumes. Resuming first made its next
        allocation collect the young generation, which then held the new model's
        hundreds of thousands of objects: 60-100 ms of the GIL per 100k tasks, for
        nothing (the models hold no cycles)."""
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            self.settled()
            if was_enabled:
                gc.enable()

    def thaw_if_idle(self) -> bool:
        """Thaw, collect and freeze again if something was frozen since the last thaw and
        the last freeze is ``thaw_after_s`` old, or the last thaw ``thaw_every_s``; True
        if it did."""
        frozen_at, now = self._frozen_at, self._monotonic()
        if frozen_at is None or (now - frozen_at < self._thaw_after_s
                                 and now - self._thawed_at < self._thaw_every_s):
            return False
        started = time.perf_counter()
        frozen = gc.get_freeze_count()
        gc.unfreeze()
        collected = gc.collect()
        gc.freeze()
        self._frozen_at = None
        self._thawed_at = self._monotonic()
        log.debug("heap thawed: %d frozen objects scanned, %d collected in %.3fs", frozen,
                  collected, time.perf_counter() - started)
        return True

    def start(self) -> None:
        """Space full collections out, and check for an idle heap periodically (on the
        running event loop)."""
        young, middle, _ = self._thresholds = gc.get_threshold()
        gc.set_threshold(young, middle, self._full_every)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop checking; the collector's thresholds as they were."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._thaw_after_s / 4)
            self.thaw_if_idle()
