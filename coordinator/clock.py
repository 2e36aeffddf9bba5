"""Time, injected: wall-clock seconds for leases, monotonic seconds for durations."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """What the coordinator asks of time."""

    def now(self) -> float:
        """Wall-clock seconds since the epoch (leases are persisted and outlive a process)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (durations, timeouts)."""
        ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        """``time.time()``."""
        return time.time()

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()
