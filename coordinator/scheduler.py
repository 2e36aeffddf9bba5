"""Named, cancellable timers on the event loop (the idea of Samza's ScheduleAfterDebounceTime).

Scheduling a name that is already pending replaces it, which gives a trailing-edge debounce:
only the last of a burst of triggers fires, ``delay`` after it. Actions run one at a time,
in the order their timers fire, so they never race each other; an action that raises is
logged and does not stop the scheduler.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

Action = Callable[[], Awaitable[None]]


class Scheduler:
    """Timers by name; ``close()`` cancels them all."""

    def __init__(self) -> None:
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._running: set[asyncio.Task[None]] = set()
        self._serial = asyncio.Lock()
        self._closed = False

    def schedule(self, name: str, delay_s: float, action: Action) -> None:
        """Run ``action`` after ``delay_s`` seconds, replacing a pending timer of ``name``."""
        if self._closed:
            return
        self.cancel(name)
        loop = asyncio.get_running_loop()
        self._timers[name] = loop.call_later(max(0.0, delay_s), self._fire, name, action)

    def cancel(self, name: str) -> None:
        """Cancel the pending timer ``name`` (no-op if none)."""
        handle = self._timers.pop(name, None)
        if handle is not None:
            handle.cancel()

    def is_scheduled(self, name: str) -> bool:
        """True while timer ``name`` is pending."""
        return name in self._timers

    def _fire(self, name: str, action: Action) -> None:
        self._timers.pop(name, None)
        task = asyncio.get_running_loop().create_task(self._run(name, action))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self, name: str, action: Action) -> None:
        async with self._serial:
            if self._closed:
                return
            try:
                await action()
            except Exception:
                log.exception("scheduled action %r failed", name)

    async def close(self) -> None:
        """Cancel every pending timer and wait for running actions to finish."""
        self._closed = True
        for name in list(self._timers):
            self.cancel(name)
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
