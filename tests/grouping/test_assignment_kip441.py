"""The KIP-441 seed's example scenarios, reproduced exactly."""

from __future__ import annotations

from grouping.assignment import AssignmentParams, assign_tasks
from grouping.model import JobModel, TaskModel
from tests.grouping.helpers import as_job_model, job_model, layout_of, tasks

ONE_STANDBY = AssignmentParams(num_standbys=1)
IN_SYNC = 0
LAGGING = 50_000  # above acceptable_recovery_lag (10 000)


def test_scaling_out_warms_up_the_new_instance_then_moves_to_it() -> None:
    ts = tasks("T1", "T2", "T3")
    initial = job_model({"I1": (["T1", "T3"], ["T2"]), "I2": (["T2"], ["T1", "T3"])}, ts)
    lags = {"I1": {"T1": 0, "T2": IN_SYNC, "T3": 0}, "I2": {"T1": IN_SYNC, "T2": 0, "T3": IN_SYNC}}
    processors = {"I1": "host-1", "I2": "host-2", "I3": "host-3"}

    first = assign_tasks(ts, processors, previous=initial, task_lags=lags,
                         stateful={"T1", "T2", "T3"}, params=ONE_STANDBY)

    assert layout_of(first) == {
        "I1": (["T1", "T3"], ["T2"]),
        "I2": (["T2"], ["T1", "T3"]),
        "I3": ([], ["T1", "T3"]),
    }
    assert first.probing_rebalance_needed

    caught_up = {**lags, "I3": {"T1": IN_SYNC, "T3": IN_SYNC}}
    second = assign_tasks(ts, processors, previous=as_job_model(first, 2), task_lags=caught_up,
                          stateful={"T1", "T2", "T3"}, params=ONE_STANDBY)

    assert layout_of(second) == {
        "I1": (["T1"], ["T2"]),
        "I2": (["T2"], ["T3"]),
        "I3": (["T3"], ["T1"]),
    }
    assert not second.probing_rebalance_needed


def _four_task_cluster() -> tuple[list[TaskModel], JobModel]:
    ts = tasks("T1", "T2", "T3", "T4")
    initial = job_model({
        "I1": (["T1", "T4"], ["T3"]),
        "I2": (["T2"], ["T1", "T4"]),
        "I3": (["T3"], ["T2"]),
    }, ts)
    return ts, initial


def test_scaling_in_with_standbys_in_sync_needs_one_rebalance() -> None:
    ts, initial = _four_task_cluster()
    lags = {"I2": {"T2": 0, "T1": IN_SYNC, "T4": IN_SYNC}, "I3": {"T3": 0, "T2": IN_SYNC}}

    result = assign_tasks(ts, {"I2": "host-2", "I3": "host-3"}, previous=initial,
                          task_lags=lags, stateful={"T1", "T2", "T3", "T4"}, params=ONE_STANDBY)

    assert layout_of(result) == {
        "I2": (["T1", "T4"], ["T2", "T3"]),
        "I3": (["T2", "T3"], ["T1", "T4"]),
    }
    assert not result.probing_rebalance_needed


def test_scaling_in_with_lagging_standbys_keeps_load_on_the_caught_up_instance() -> None:
    ts, initial = _four_task_cluster()
    stateful = {"T1", "T2", "T3", "T4"}
    processors = {"I2": "host-2", "I3": "host-3"}
    lags = {"I2": {"T2": 0, "T1": LAGGING, "T4": LAGGING}, "I3": {"T3": 0, "T2": LAGGING}}

    first = assign_tasks(ts, processors, previous=initial, task_lags=lags,
                         stateful=stateful, params=ONE_STANDBY)

    assert layout_of(first) == {
        "I2": (["T1", "T2", "T4"], ["T3"]),
        "I3": (["T3"], ["T1", "T2", "T4"]),
    }
    assert first.probing_rebalance_needed

    # I3 finishes restoring T4; the others are still lagging.
    restored = {"I2": {"T1": 0, "T2": 0, "T4": 0, "T3": LAGGING},
                "I3": {"T3": 0, "T4": IN_SYNC, "T1": LAGGING, "T2": LAGGING}}
    second = assign_tasks(ts, processors, previous=as_job_model(first, 2), task_lags=restored,
                          stateful=stateful, params=ONE_STANDBY)

    assert layout_of(second) == {
        "I2": (["T1", "T2"], ["T3", "T4"]),
        "I3": (["T3", "T4"], ["T1", "T2"]),
    }
    assert not second.probing_rebalance_needed


def test_standbys_prefer_another_location_than_the_active() -> None:
    ts = tasks("T1", "T2", "T3", "T4")
    processors = {"a1": "rack-a", "a2": "rack-a", "b1": "rack-b", "b2": "rack-b"}
    result = assign_tasks(ts, processors, stateful={t.name for t in ts}, params=ONE_STANDBY)
    layout = layout_of(result)
    location_of_active = {name: processors[pid] for pid, (actives, _) in layout.items()
                          for name in actives}
    for pid, (_, standbys) in layout.items():
        for name in standbys:
            assert processors[pid] != location_of_active[name], (name, pid)


def test_no_caught_up_processor_means_the_most_caught_up_one_runs_the_active() -> None:
    ts = tasks("T1")
    lags = {"I1": {"T1": 90_000}, "I2": {"T1": 40_000}}
    result = assign_tasks(ts, {"I1": "h1", "I2": "h2", "I3": "h3"}, task_lags=lags,
                          stateful={"T1"})
    assert layout_of(result)["I2"][0] == ["T1"]


def test_warmups_are_limited_by_max_warmup_replicas() -> None:
    ts = tasks(*(f"T{i}" for i in range(8)))
    everything_on_i1 = {"I1": {t.name: 0 for t in ts}}
    previous = job_model({"I1": ([t.name for t in ts], [])}, ts)
    result = assign_tasks(ts, {"I1": "h1", "I2": "h2", "I3": "h3"}, previous=previous,
                          task_lags=everything_on_i1, stateful={t.name for t in ts},
                          params=AssignmentParams(max_warmup_replicas=3))
    assert layout_of(result)["I1"][0] == sorted(t.name for t in ts)  # nothing else caught up
    assert len(result.warmups) == 3
    assert result.probing_rebalance_needed
    assert len(result.movements) > 3  # more moves wanted than warm-ups allowed at once
