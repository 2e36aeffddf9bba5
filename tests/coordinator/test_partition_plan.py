"""The pure part of partition monitoring: which counts to use, and what to report."""

from __future__ import annotations

from coordinator.input_monitors.partitions import plan_inputs
from coordinator.input_monitors.poller import InputState


def test_growth_is_taken_and_first_sight_sets_the_count() -> None:
    use, states = plan_inputs({"orders": 4, "new": None}, {"orders": 8, "new": 3})
    assert use == {"orders": 8, "new": 3}
    assert {s: st for s, (st, _) in states.items()} == {"orders": InputState.OK,
                                                       "new": InputState.OK}


def test_a_missing_topic_keeps_the_current_count() -> None:
    use, states = plan_inputs({"orders": 4, "never": None}, {"orders": None, "never": None})
    assert use == {"orders": 4}  # never wiped; an unknown stream simply has none yet
    assert states["orders"][0] is InputState.MISSING
    assert "does not exist" in states["orders"][1]


def test_a_shrink_is_refused_with_the_way_out() -> None:
    use, states = plan_inputs({"orders": 8}, {"orders": 2})
    assert use == {"orders": 8}
    state, detail = states["orders"]
    assert state is InputState.SHRUNK
    assert "fewer than the job's 8" in detail and "orders:2" in detail
