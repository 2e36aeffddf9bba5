"""Waking long polls: the waiters of a change, woken only when what they wait for changed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable

from coordinator.clock import Clock


class ChangeSignal:
    """Long polls park here until their condition holds. :meth:`notify` is given what the
    waiters look at (the latest version, its barrier's state): it wakes them only when that
    differs from the last notification. Each ack changes the barrier's acked set, which no
    waiter looks at: waking 1000 parked polls on each of 1000 acks cost a leader tens of
    seconds of CPU per rebalance."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._event = asyncio.Event()
        self._signalled: Hashable = None

    async def wait(self, changed: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``changed()`` holds (checked at each wake-up); False on timeout."""
        deadline = self._clock.monotonic() + max(0.0, timeout_s)
        while True:
            if changed():
                return True
            left = deadline - self._clock.monotonic()
            if left <= 0:
                return False
            event = self._event
            try:
                await asyncio.wait_for(event.wait(), left)
            except TimeoutError:
                return changed()

    def notify(self, signal: Hashable) -> None:
        """Wake the waiters if ``signal`` differs from the last one."""
        if signal == self._signalled:
            return
        self._signalled = signal
        # every waiter of the current event wakes; later waiters get a fresh one
        event, self._event = self._event, asyncio.Event()
        event.set()
