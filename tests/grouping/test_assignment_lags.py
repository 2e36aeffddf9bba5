"""The lags the assignment reads per task, against their definition: a task's own reports;
a split child's are its parent's; a merged task is known only on processors that reported
every child, as far behind as its furthest child. Negative reports count as caught up."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from grouping.assignment import AssignmentParams, _World
from grouping.generation import generate_job_model
from grouping.groupers import GroupByPartition
from grouping.lineage import PreviousAssignment
from grouping.model import JobModel, SystemStreamPartition

PROCS = {f"p{i}": f"host-{i}" for i in range(4)}
INPUTS = [SystemStreamPartition("kafka", "orders", p) for p in range(2)]
ACCEPTABLE = AssignmentParams().acceptable_recovery_lag


def expected_lags(previous: JobModel, factor: int, name: str, bucket: int,
                  group: Any, reports: dict[str, dict[str, int]]) -> dict[int, int]:
    pids = sorted(PROCS)

    def direct(task: str) -> dict[int, int]:
        return {pids.index(p): max(0, r[task]) for p, r in reports.items() if task in r}

    own = direct(name)
    if own:
        return own
    index = PreviousAssignment.of(previous)
    buckets = index.buckets_of(group)
    if name in index.owner:
        return {}
    lineage = index.lineage_in(buckets, bucket, factor)
    if not lineage:
        return {}
    if len(lineage) == 1:
        return direct(lineage[0])
    per_child = [direct(c) for c in lineage]
    common = set.intersection(*(set(d) for d in per_child))
    return {j: max(d[j] for d in per_child) for j in common}


def expected_good(lags: dict[int, int]) -> tuple[int, ...] | None:
    if not lags:
        return None
    rank = {j: 0 if lag <= ACCEPTABLE else lag for j, lag in lags.items()}
    best = min(rank.values())
    return tuple(sorted(j for j, r in rank.items() if r == best))


lag_values = st.sampled_from([-5, 0, 7, ACCEPTABLE, ACCEPTABLE + 1, 50_000])


@given(before=st.sampled_from([1, 2, 4, 8]), after=st.sampled_from([1, 2, 4, 8]),
       exclusive=st.booleans(), data=st.data())
def test_lags_follow_lineage_and_merge_by_the_furthest_child(
    before: int, after: int, exclusive: bool, data: st.DataObject
) -> None:
    previous = generate_job_model(1, INPUTS, GroupByPartition(), before, PROCS,
                                  stateful=True).job_model
    new = generate_job_model(2, INPUTS, GroupByPartition(), after, PROCS, previous=previous,
                             stateful=True).job_model
    names = sorted({*previous.active_tasks(), *new.active_tasks(), "Partition 9"})
    if exclusive:  # each task reported by at most one processor (no standbys): the bulk path
        # two reporters at most, so a merged task's children often share one
        reporter = data.draw(st.lists(st.sampled_from([None, "p0", "p1"]),
                                      min_size=len(names), max_size=len(names)),
                             label="reporter")
        reports: dict[str, dict[str, int]] = {pid: {} for pid in PROCS}
        for name, pid in zip(names, reporter, strict=True):
            if pid is not None:
                reports[pid][name] = data.draw(lag_values)
    else:
        reports = {pid: data.draw(st.dictionaries(st.sampled_from(names), lag_values,
                                                  max_size=len(names)), label=pid)
                   for pid in PROCS}
    tasks = list(new.active_tasks().values())
    world = _World(tasks, PROCS, previous, {}, reports, True, AssignmentParams(), after)
    for u, task in enumerate(world.tasks):
        want = expected_lags(previous, after, task.name, task.key_bucket,
                             task.partition_group, reports)
        assert world.lag_of[u] == want, task.name
        assert world.good[u] == expected_good(want), task.name


def test_a_merged_task_is_as_far_behind_as_its_furthest_child() -> None:
    previous = generate_job_model(1, INPUTS, GroupByPartition(), 4, PROCS,
                                  stateful=True).job_model
    new = generate_job_model(2, INPUTS, GroupByPartition(), 2, PROCS, previous=previous,
                             stateful=True).job_model
    # p0 holds state of every old bucket; bucket 0 of each partition is far behind
    reports = {"p0": {n: 50_000 if n.endswith("_0_4") else -3
                      for n in previous.active_tasks()}}
    world = _World(list(new.active_tasks().values()), PROCS, previous, {}, reports, True,
                   AssignmentParams(), 2)
    lags = {t.name: world.lag_of[u] for u, t in enumerate(world.tasks)}
    assert lags == {"Partition 0_0_2": {0: 50_000}, "Partition 0_1_2": {0: 0},
                    "Partition 1_0_2": {0: 50_000}, "Partition 1_1_2": {0: 0}}
