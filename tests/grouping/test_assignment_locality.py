"""Host affinity: Samza's GroupByContainerIds locality cases, and SAMZA-1554's preference
order (previous processor, then same location, then any)."""

from __future__ import annotations

from grouping.assignment import assign_tasks
from grouping.measures import moved_tasks
from tests.grouping.helpers import as_job_model, job_model, layout_of, task, tasks

T1, T2, T3 = "testTasKId1", "testTaskId2", "testTaskId3"  # capital K as in Samza's test
THREE = [task(T1, 1), task(T2, 2), task(T3, 3)]
LOCALITY = {T1: "L1", T2: "L2", T3: "L3"}


def test_perfect_locality_match_is_used_and_stable() -> None:
    processors = {"p1": "L1", "p2": "L2", "p3": "L3"}
    first = assign_tasks(THREE, processors, task_locality=LOCALITY)
    expected: dict[str, tuple[list[str], list[str]]] = {
        "p1": ([T1], []), "p2": ([T2], []), "p3": ([T3], [])}
    assert layout_of(first) == expected
    again = assign_tasks(THREE, processors, task_locality=LOCALITY)
    assert layout_of(again) == expected


def test_one_processor_gets_every_task() -> None:
    result = assign_tasks(THREE, {"p1": "L1"}, task_locality=LOCALITY)
    assert layout_of(result) == {"p1": ([T1, T2, T3], [])}


def test_partial_locality_fills_underloaded_processors_in_id_order() -> None:
    result = assign_tasks(THREE, {"p1": "L1", "p2": "L2", "p3": "L3"},
                          task_locality={T1: "L1"})
    assert layout_of(result) == {"p1": ([T1], []), "p2": ([T2], []), "p3": ([T3], [])}


def test_processor_leaving_moves_only_its_tasks() -> None:
    processors = {"p1": "L1", "p2": "L2", "p3": "L3"}
    first = assign_tasks(THREE, processors, task_locality=LOCALITY)
    result = assign_tasks(THREE, {"p1": "L1", "p2": "L2"}, previous=as_job_model(first, 1),
                          task_locality=LOCALITY)
    assert layout_of(result) == {"p1": ([T1, T3], []), "p2": ([T2], [])}
    assert moved_tasks(as_job_model(first, 1), result.containers) == 1


def test_more_processors_than_tasks_leaves_the_extra_ones_empty() -> None:
    result = assign_tasks([task("Partition 0", 0)], {"p1": "L1", "p2": "L2"})
    assert layout_of(result) == {"p1": (["Partition 0"], []), "p2": ([], [])}


def test_previous_processor_beats_location_which_beats_least_loaded() -> None:
    ts = tasks("A", "B", "C", "D")
    previous = job_model({"old": (["A", "B"], []), "p1": (["C"], []), "p2": (["D"], [])}, ts)
    # "old" died; "new" runs on its host; A and B should follow their location to "new".
    result = assign_tasks(ts, {"p1": "h1", "p2": "h2", "new": "h-old"}, previous=previous,
                          task_locality={"A": "h-old", "B": "h-old", "C": "h1", "D": "h2"},
                          )
    layout = layout_of(result)
    assert layout["p1"][0] == ["C"]
    assert layout["p2"][0] == ["D"]
    assert layout["new"][0] == ["A", "B"]


def test_restarted_processor_with_new_id_gets_its_host_tasks_back() -> None:
    ts = tasks("A", "B", "C", "D")
    previous = job_model({"w1": (["A", "B"], []), "w2": (["C", "D"], [])}, ts)
    locality = {"A": "host-a", "B": "host-a", "C": "host-b", "D": "host-b"}
    result = assign_tasks(ts, {"w1-restarted": "host-a", "w2": "host-b"},
                          previous=previous, task_locality=locality)
    assert layout_of(result) == {"w1-restarted": (["A", "B"], []), "w2": (["C", "D"], [])}
