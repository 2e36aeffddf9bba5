"""Job model generation composes grouping and assignment, recording its config."""

from __future__ import annotations

from grouping.generation import generate_job_model, generate_traced
from grouping.groupers import AllSspToSingleTask, GroupByPartition, GroupSpec
from grouping.lineage import PreviousAssignment
from grouping.measures import balance, moved_tasks
from grouping.model import SSP

INPUTS = [SSP("kafka", "orders", p) for p in range(4)]
PROCESSORS = {"w1": "host-a", "w2": "host-b"}


def test_generation_scales_1_2_4_2_keeping_children_with_parents() -> None:
    previous = None
    for version, factor in enumerate([1, 2, 4, 2], start=1):
        generated = generate_job_model(version, INPUTS, GroupByPartition(), factor, PROCESSORS,
                                       previous=previous)
        model = generated.job_model
        assert model.version == version
        assert model.elasticity_factor == factor
        assert model.ssp_grouper == "GroupByPartition"
        assert sum(len(c.tasks) for c in model.containers.values()) == 4 * factor
        assert balance(model) == 0
        if previous is not None:
            assert moved_tasks(previous, model) == 0
        previous = model


def test_all_ssp_to_single_task_pins_one_task_per_processor() -> None:
    model = generate_job_model(1, INPUTS, AllSspToSingleTask(), 1, PROCESSORS).job_model
    assert {pid: list(c.tasks) for pid, c in model.containers.items()} == {
        "w1": ["Task-w1"], "w2": ["Task-w2"]}


def test_tasks_sharing_their_ssps_follow_lineage_by_name() -> None:
    # AllSspToSingleTask's tasks all read every SSP: no key space tells them apart
    first = generate_job_model(1, INPUTS, AllSspToSingleTask(), 1, PROCESSORS).job_model
    more = {**PROCESSORS, "w3": "host-c"}
    second = generate_job_model(2, INPUTS, AllSspToSingleTask(), 1, more,
                                previous=first).job_model
    index = PreviousAssignment.of(first)
    for task in second.active_tasks().values():
        expected = (task.name,) if task.name in first.active_tasks() else ()
        assert index.lineage(task, 1) == expected
    assert moved_tasks(first, second) == 1  # only the new processor's new task
    assert second.active_owner() == {"Task-w1": "w1", "Task-w2": "w2", "Task-w3": "w3"}


def test_partition_expansion_keeps_old_tasks_in_place() -> None:
    first = generate_job_model(1, INPUTS, GroupByPartition(), 2, PROCESSORS).job_model
    grown = [SSP("kafka", "orders", p) for p in range(8)]
    second = generate_job_model(2, grown, GroupByPartition(), 2, PROCESSORS,
                                previous=first).job_model
    assert moved_tasks(first, second) == 8  # only the 8 new virtual tasks are "moved" (new)
    old_owner = first.active_owner()
    new_owner = second.active_owner()
    assert all(new_owner[name] == pid for name, pid in old_owner.items())


def test_leftovers_hold_the_intermediates_and_change_nothing() -> None:
    """A caller that frees the intermediates later (the leader's generator) gets the same
    model; the grouper's specs and the assignment's indexed inputs are handed to it."""
    ssps = [SSP("kafka", "events", p) for p in range(6)]
    procs = {"p1": "h1", "p2": "h2", "p3": "h3"}
    before = generate_job_model(1, ssps, GroupByPartition(), 4, procs, stateful=True)
    for stateful in (True, False, {"Partition 0_0_2", "Partition 3_1_2"}):
        leftovers: list[object] = []
        kept, trace = generate_traced(2, ssps, GroupByPartition(), 2, procs, before.job_model,
                                      None, None, stateful, None, 64, None, leftovers)
        plain = generate_job_model(2, ssps, GroupByPartition(), 2, procs,
                                   previous=before.job_model, stateful=stateful,
                                   max_elasticity_factor=64)
        assert kept.job_model == plain.job_model
        assert trace is not None
        kinds = {type(x).__name__ for x in leftovers}
        assert {"list", "World", "Placer"} <= kinds
        specs = next(x for x in leftovers if isinstance(x, list) and x
                     and isinstance(x[0], GroupSpec))
        assert len(specs) == 6
