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
freezes again.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger("coxswain.service")


class FrozenHeap:
    """Freezes the heap after each new job model; thaws and collects once when idle."""

    def __init__(self, thaw_after_s: float = 60.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._thaw_after_s = thaw_after_s
        self._monotonic = monotonic
        self._frozen_at: float | None = None  # None: nothing frozen since the last thaw
        self._task: asyncio.Task[None] | None = None

    def settled(self) -> None:
        """A new job model is made and rendered: freeze what is alive now."""
        gc.freeze()
        self._frozen_at = self._monotonic()

    def thaw_if_idle(self) -> bool:
        """Thaw, collect and freeze again if the last freeze is ``thaw_after_s`` old
        (and none came since the last thaw); True if it did."""
        frozen_at = self._frozen_at
        if frozen_at is None or self._monotonic() - frozen_at < self._thaw_after_s:
            return False
        started = time.perf_counter()
        frozen = gc.get_freeze_count()
        gc.unfreeze()
        collected = gc.collect()
        gc.freeze()
        self._frozen_at = None
        log.debug("heap thawed: %d frozen objects scanned, %d collected in %.3fs", frozen,
                  collected, time.perf_counter() - started)
        return True

    def start(self) -> None:
        """Check for an idle heap periodically (on the running event loop)."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop checking."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._thaw_after_s / 4)
            self.thaw_if_idle()
