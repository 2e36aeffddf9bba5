"""The source's own pacing (``worker.sources.pacing``): once a gap, at once for a new plan."""

from __future__ import annotations

from worker.sources.pacing import POLL_S, Pacing, adds, poll_interval
from worker.sources.source_plan import PartitionStart, SourcePlan


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


def test_a_plan_that_only_drops_waits_for_the_gap() -> None:
    clock = Clock()
    pacing = Pacing(0.25, clock)
    pacing.looked(3)
    clock.now += 0.01
    assert not pacing.due(4, adds=False)  # lost tasks: the next batch only reads less
    clock.now += 0.25
    assert pacing.due(4, adds=False)


def test_what_a_plan_adds_to_the_last_batchs_reads() -> None:
    read = {"t/0": {"from": 5, "to": 9, "g": 1}, "t/1": {"from": 0, "to": 0, "g": 0}}
    same = SourcePlan(7, {"t/0": PartitionStart("3", 1), "t/1": PartitionStart("0")})
    assert not adds(same, read)
    assert not adds(SourcePlan(8, {"t/0": PartitionStart("3", 1)}), read)  # dropped one
    assert adds(SourcePlan(9, {**same.partitions, "t/2": PartitionStart("0")}), read)
    assert adds(SourcePlan(9, {"t/0": PartitionStart("4", 2)}), read)  # read again
    assert adds(same, {})  # the first batch


def test_no_gap_looks_at_every_tick() -> None:
    pacing = Pacing(0.0, Clock())
    pacing.looked(1)
    assert pacing.due(1)


def test_the_query_ticks_at_most_the_gap() -> None:
    assert poll_interval(0.25) == POLL_S
    assert poll_interval(0.02) == 0.02
