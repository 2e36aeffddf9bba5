"""A clock the test moves by hand (wall and monotonic time are one number)."""

from __future__ import annotations


class FakeClock:
    def __init__(self, start: float = 1_000.0) -> None:
        self.t = start

    def now(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t
