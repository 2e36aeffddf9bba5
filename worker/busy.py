"""How busy a worker is: the share of recent wall time its batches took. It falls to zero
when no batch runs (Spark runs none without new input), which the last batch's own
figures cannot show: the autosizer scales down on it."""

from __future__ import annotations

import threading
from collections import deque


class BusyMeter:
    """Batch intervals of the last ``window_s`` seconds."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._spans: deque[tuple[float, float]] = deque()
        self._lock = threading.Lock()

    def record(self, started: float, ended: float) -> None:
        """A batch ran from ``started`` to ``ended`` (monotonic seconds)."""
        with self._lock:
            self._spans.append((started, ended))

    def share(self, now: float) -> float:
        """0..1: the part of the last ``window_s`` seconds spent in batches."""
        since = now - self.window_s
        with self._lock:
            while self._spans and self._spans[0][1] <= since:
                self._spans.popleft()
            busy = sum(min(end, now) - max(start, since) for start, end in self._spans)
        return max(0.0, min(1.0, busy / self.window_s))
