"""Task -> placement slot (pure): sticky, balanced, and what each slot reads."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from worker.cluster.placement import (
    assign_slots,
    slot_ranges,
    slot_sql,
    uncovered_to_retry,
)
from worker.sources.kafka import KafkaRange

names = st.lists(st.sampled_from([f"t{i}" for i in range(40)]), unique=True, max_size=40)


def loads(assigned: dict[str, int], slots: int) -> list[int]:
    found = [0] * slots
    for slot in assigned.values():
        found[slot] += 1
    return found


@given(names, st.dictionaries(st.sampled_from([f"t{i}" for i in range(40)]),
                              st.integers(-2, 12)), st.integers(1, 10))
def test_every_task_gets_a_slot_and_loads_differ_by_one_at_most(
        tasks: list[str], previous: dict[str, int], slots: int) -> None:
    assigned = assign_slots(previous, tasks, slots)
    assert set(assigned) == set(tasks)
    assert all(0 <= s < slots for s in assigned.values())
    found = loads(assigned, slots)
    assert max(found) - min(found) <= 1
    # a task leaves its previous slot only for the balance: that slot is then full
    share = -(-len(tasks) // slots)
    for task, slot in previous.items():
        if task in assigned and 0 <= slot < slots and assigned[task] != slot:
            assert found[slot] >= len(tasks) // slots and found[slot] <= share


@given(names, names, st.integers(1, 10))
def test_tasks_added_to_a_balanced_assignment_move_no_other(
        before: list[str], added: list[str], slots: int) -> None:
    first = assign_slots({}, before, slots)
    second = assign_slots(first, before + [t for t in added if t not in before], slots)
    assert {t: second[t] for t in before} == first


@given(names, st.integers(1, 10))
def test_the_same_tasks_stay_where_they_are(tasks: list[str], slots: int) -> None:
    first = assign_slots({}, tasks, slots)
    assert assign_slots(first, tasks, slots) == first


def test_a_removed_slot_moves_its_tasks_to_the_least_loaded() -> None:
    before = {"a": 0, "b": 1, "c": 2, "d": 3}
    after = assign_slots(before, ["a", "b", "c", "d"], 2)  # a new placement of 2 slots
    assert after["a"] == 0 and after["b"] == 1
    assert sorted(loads(after, 2)) == [2, 2]


def test_each_slot_reads_the_ranges_of_its_tasks_partitions_with_records() -> None:
    ranges = {"in/0": {"from": 5, "to": 9, "g": 1}, "in/1": {"from": 3, "to": 3, "g": 0},
              "in/2": {"from": 0, "to": 4, "g": 2}}
    got = slot_ranges(ranges, {0: {("in", 0), ("in", 1)}, 1: {("in", 0), ("in", 2)},
                               2: {("in", 1)}})
    assert got == {0: [KafkaRange("in", 0, 5, 9, 1)],
                   1: [KafkaRange("in", 0, 5, 9, 1), KafkaRange("in", 2, 0, 4, 2)]}


def test_slot_sql_names_each_tasks_slot() -> None:
    assert slot_sql({}) == "-1"
    assert slot_sql({"Partition 0_1_2": 3, "it's": 0}) == (
        "CASE taskName WHEN 'Partition 0_1_2' THEN 3 WHEN 'it\\'s' THEN 0 ELSE -1 END")


executors_ = st.frozensets(st.sampled_from([f"e{i}:1" for i in range(6)]))
tried = st.dictionaries(st.sampled_from([f"e{i}:1" for i in range(6)]),
                        st.tuples(st.integers(0, 6), st.floats(0, 100)))


@given(executors_, executors_, tried, st.floats(0, 200))
def test_an_executor_without_a_slot_is_placed_again_a_bounded_number_of_times(
        now: frozenset[str], covered: frozenset[str], tries: dict[str, tuple[int, float]],
        at: float) -> None:
    retry = uncovered_to_retry(now, covered, tries, at, limit=5)
    assert retry <= now - covered  # only live executors that hold no slot
    for e in now - covered:
        count, last = tries.get(e, (0, 0.0))
        # never tried: at once; then with a doubling pause, and never past the bound
        assert (e in retry) == (count == 0 or (count < 5 and at - last >= 2 ** (count - 1)))


def test_a_new_executor_is_retried_with_backoff_until_its_tries_run_out() -> None:
    tries: dict[str, tuple[int, float]] = {}
    now, covered = frozenset({"driver:1", "a:1", "b:1"}), frozenset({"driver:1", "a:1"})
    made = []
    at = 0.0
    while at < 100:
        if uncovered_to_retry(now, covered, tries, at, limit=5):
            made.append(at)  # each placement RDD leaves b without a slot
            tries["b:1"] = (tries.get("b:1", (0, 0.0))[0] + 1, at)
        at += 0.5  # a batch every half second
    assert made == [0.0, 1.0, 3.0, 7.0, 15.0]
    assert not uncovered_to_retry(now, covered | {"b:1"}, {}, at)  # covered: nothing to do
