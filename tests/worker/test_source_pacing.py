"""The source's own pacing (``worker.sources.pacing``): once a gap, at once for a new plan."""

from __future__ import annotations

from worker.sources.pacing import POLL_S, Pacing, poll_interval


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_looks_once_a_gap_while_the_plan_stays() -> None:
    clock = Clock()
    pacing = Pacing(0.25, clock)
    assert pacing.due(3)  # never looked: at once
    pacing.looked(3)
    clock.now += 0.2
    assert not pacing.due(3)
    clock.now += 0.05
    assert pacing.due(3)


def test_a_changed_plan_is_looked_at_at_once() -> None:
    clock = Clock()
    pacing = Pacing(0.25, clock)
    pacing.looked(3)
    clock.now += 0.01
    assert pacing.due(4)  # tasks added (or removed) since the last look
    pacing.looked(4)
    assert not pacing.due(4)


def test_no_gap_looks_at_every_tick() -> None:
    pacing = Pacing(0.0, Clock())
    pacing.looked(1)
    assert pacing.due(1)


def test_the_query_ticks_at_most_the_gap() -> None:
    assert poll_interval(0.25) == POLL_S
    assert poll_interval(0.02) == 0.02
