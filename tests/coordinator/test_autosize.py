"""The autosizer's policy (pure): never outside min/max, monotone in the backlog, never
down while the backlog grows, and honest about thin data."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.autosize import Policy, Sample, recommend, slope

POLICY = Policy(min_factor=1, max_factor=16)


def window(backlogs: list[int], capacity: float = 1000.0, consumed: float = 500.0,
           busy: float = 0.5, factor: int = 2, processors: int = 2,
           every_s: float = 5.0) -> list[Sample]:
    return [Sample(i * every_s, b, capacity, consumed, busy, processors, factor)
            for i, b in enumerate(backlogs)]


loads = st.fixed_dictionaries({
    "backlogs": st.lists(st.integers(0, 10**7), min_size=5, max_size=15),
    "capacity": st.floats(1, 1e6), "consumed": st.floats(0, 1e6),
    "busy": st.floats(0, 1), "factor": st.sampled_from([1, 2, 4, 8, 16]),
    "processors": st.integers(1, 100)})


@given(loads)
def test_never_outside_min_and_max(load: dict) -> None:  # type: ignore[type-arg]
    r = recommend(window(**load), POLICY)
    assert POLICY.min_factor <= r.elasticity_factor <= POLICY.max_factor
    assert r.processors >= 1


@given(loads, st.integers(0, 10**7))
def test_monotone_in_the_backlog(load: dict, extra: int) -> None:  # type: ignore[type-arg]
    lower = recommend(window(**load), POLICY)
    more = dict(load, backlogs=[b + extra for b in load["backlogs"]])
    higher = recommend(window(**more), POLICY)
    assert higher.elasticity_factor >= lower.elasticity_factor


@given(loads)
def test_never_down_while_the_backlog_grows(load: dict) -> None:  # type: ignore[type-arg]
    growing = dict(load, backlogs=sorted(load["backlogs"]))
    r = recommend(window(**growing), POLICY)
    trend = slope([(s.at, float(s.backlog)) for s in window(**growing)])
    if trend > POLICY.growing:
        assert r.elasticity_factor >= min(growing["factor"], POLICY.max_factor)


def test_a_growing_backlog_on_saturated_processors_scales_up() -> None:
    r = recommend(window([0, 5000, 10000, 15000, 20000, 25000], busy=1.0, consumed=1000),
                  POLICY)
    # input 2000/s (1000 consumed + 1000 of growth) x 1.25 + 25000 / 120 s to drain =
    # 2708 records/s against 1000: x4 (the power of two covering 2.7)
    assert r.decided and r.elasticity_factor == 8 and r.reason.startswith("scale up")
    assert r.figures["backlogTrend"] == 1000.0 and r.figures["inputRate"] == 2000.0
    assert r.processors == 6


def test_idle_processors_without_backlog_scale_down_one_step() -> None:
    r = recommend(window([0] * 6, busy=0.1, consumed=50, factor=8), POLICY)
    assert (r.elasticity_factor, r.decided) == (4, True)
    assert r.reason.startswith("scale down")


def test_a_steady_job_keeps_its_factor() -> None:
    r = recommend(window([100] * 6, busy=0.6), POLICY)
    assert r.elasticity_factor == 2 and r.reason.startswith("keep")


def test_thin_data_says_so() -> None:
    r = recommend(window([0, 10]), POLICY)
    assert not r.decided and "too little data" in r.reason
    assert r.elasticity_factor == 2
    assert not recommend([], POLICY).decided
