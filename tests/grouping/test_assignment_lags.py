"""The lags the assignment reads per task, against their definition: a task's state is its
lineage's (a split child's is its parent's; a merged task is known only on processors that
reported every child, as far behind as its furthest child); a task without lineage has only
its own reports. Reports that name only their own processor's previous tasks take a faster
path, and a faster one still when a processor reports all of them caught up; every path is
checked. A lag is read as the assignment ranks it: 0 within the acceptable recovery
lag (negative reports too), else the lag."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from grouping.assignment import AssignmentParams
from grouping.assignment.world import World
from grouping.generation import generate_job_model
from grouping.groupers import GroupByPartition
from grouping.lineage import PreviousAssignment
from grouping.model import JobModel, SystemStreamPartition
from grouping.task_names import parse_standby_task_name

PROCS = {f"p{i}": f"host-{i}" for i in range(4)}
INPUTS = [SystemStreamPartition("kafka", "orders", p) for p in range(2)]
#: a stream added to the job: every partition group is new, lineage goes by task name
WIDER = [*INPUTS, *(SystemStreamPartition("kafka", "refunds", p) for p in range(2))]
ACCEPTABLE = AssignmentParams().acceptable_recovery_lag


def expected_lags(previous: JobModel, factor: int, name: str, bucket: int,
                  group: Any, reports: dict[str, dict[str, int]],
                  live: dict[str, str]) -> dict[int, int]:
    pids = sorted(live)

    def direct(task: str) -> dict[int, int]:
        # as the assignment ranks a lag: 0 within the acceptable recovery lag
        return {pids.index(p): 0 if r[task] <= ACCEPTABLE else r[task]
                for p, r in reports.items() if task in r and p in live}

    index = PreviousAssignment.of(previous)
    lineage = index.lineage_in(index.history_of(group), bucket, factor)
    if not lineage and name in index.owner:
        lineage = (name,)
    if not lineage:
        return direct(name)
    if len(lineage) == 1:
        return direct(lineage[0])
    per_child = [direct(c) for c in lineage]
    common = set.intersection(*(set(d) for d in per_child))
    return {j: max(d[j] for d in per_child) for j in common}


def expected_good(lags: dict[int, int]) -> tuple[int, ...] | None:
    if not lags:
        return None
    best = min(lags.values())
    return tuple(sorted(j for j, rank in lags.items() if rank == best))


lag_values = st.sampled_from([-5, 0, 7, ACCEPTABLE, ACCEPTABLE + 1, 50_000])


@given(before=st.sampled_from([1, 2, 4, 8]), after=st.sampled_from([1, 2, 4, 8]),
       reporting=st.sampled_from(["own", "caught-up", "exclusive", "any"]),
       lost=st.sampled_from([None, "p1", "p3"]), widened=st.booleans(),
       standbys=st.sampled_from([0, 1, 2]), data=st.data())
def test_lineage_stickiness_and_lags_follow_their_definitions(
    before: int, after: int, reporting: str, lost: str | None, widened: bool,
    standbys: int, data: st.DataObject
) -> None:
    previous = generate_job_model(1, INPUTS, GroupByPartition(), before, PROCS,
                                  stateful=True,
                                  params=AssignmentParams(num_standbys=standbys)).job_model
    new = generate_job_model(2, WIDER if widened else INPUTS, GroupByPartition(), after,
                             PROCS, previous=previous, stateful=True).job_model
    names = sorted({*previous.active_tasks(), *new.active_tasks(), "Partition 9"})
    reports: dict[str, dict[str, int]] = {pid: {} for pid in PROCS}
    if reporting == "own":  # each processor reports some of the copies it held: fast path
        for pid, container in previous.containers.items():
            for copy in container.tasks:
                standby = parse_standby_task_name(copy)
                name = standby[0] if standby else copy
                if data.draw(st.booleans(), label=f"{pid} reports {name}"):
                    reports[pid][name] = data.draw(lag_values)
    elif reporting == "caught-up":  # every copy it held, within the acceptable lag
        for pid, container in previous.containers.items():
            for copy in container.tasks:
                standby = parse_standby_task_name(copy)
                reports[pid][standby[0] if standby else copy] = data.draw(
                    st.sampled_from([-5, 0, 7, ACCEPTABLE]), label=f"{pid} lag")
    elif reporting == "exclusive":  # each task reported by at most one processor
        # two reporters at most, so a merged task's children often share one
        reporter = data.draw(st.lists(st.sampled_from([None, "p0", "p1"]),
                                      min_size=len(names), max_size=len(names)),
                             label="reporter")
        for name, chosen in zip(names, reporter, strict=True):
            if chosen is not None:
                reports[chosen][name] = data.draw(lag_values)
    else:
        reports = {pid: data.draw(st.dictionaries(st.sampled_from(names), lag_values,
                                                  max_size=len(names)), label=pid)
                   for pid in PROCS}
    live = {pid: loc for pid, loc in PROCS.items() if pid != lost}
    tasks = list(new.active_tasks().values())
    # last locations known for some names, old and new
    locality = {name: f"host-{data.draw(st.integers(0, 5), label=name)}" for name in
                data.draw(st.lists(st.sampled_from(names), unique=True), label="located")}
    world = World(tasks, live, previous, locality, reports, True, AssignmentParams(), after)
    index = PreviousAssignment.of(previous)
    pids = sorted(live)
    every_lineage = world.lineage.all()
    for u, task in enumerate(world.tasks):
        # the inlined lineage pass agrees with PreviousAssignment's rules
        lineage = index.lineage(task, after)
        assert world.lineage[u] == lineage == every_lineage[u], task.name
        # a last location is the task's own name's, else its first ancestor's
        located = [locality[n] for n in (task.name, *lineage) if n in locality]
        assert world.locality[u] == (located[0] if located else None), task.name
        owner = index.sticky_owner(lineage, live)
        assert world.sticky[u] == (-1 if owner is None else pids.index(owner)), task.name
        want = expected_lags(previous, after, task.name, task.key_bucket,
                             task.partition_group, reports, live)
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
    world = World(list(new.active_tasks().values()), PROCS, previous, {}, reports, True,
                   AssignmentParams(), 2)
    lags = {t.name: world.lag_of[u] for u, t in enumerate(world.tasks)}
    assert lags == {"Partition 0_0_2": {0: 50_000}, "Partition 0_1_2": {0: 0},
                    "Partition 1_0_2": {0: 50_000}, "Partition 1_1_2": {0: 0}}


def test_a_processor_is_caught_up_only_on_the_tasks_it_reported() -> None:
    # The faster path takes a processor as caught up on every task it ran when it reported
    # all of them within the acceptable lag. One unreported task, or one beyond it, and
    # each task's lag is read from its report again.
    previous = generate_job_model(1, INPUTS, GroupByPartition(), 4, PROCS,
                                  stateful=True).job_model
    held = sorted(previous.containers["p0"].tasks)
    assert len(held) == 2
    tasks = list(previous.active_tasks().values())
    cases = [
        ({held[0]: 0}, {held[0]: {0: 0}, held[1]: {}}),
        ({held[0]: 7, held[1]: -5}, {held[0]: {0: 0}, held[1]: {0: 0}}),
        ({held[0]: 7, held[1]: ACCEPTABLE + 1},
         {held[0]: {0: 0}, held[1]: {0: ACCEPTABLE + 1}}),
    ]
    for report, want in cases:
        world = World(tasks, PROCS, previous, {}, {"p0": report}, True, AssignmentParams(), 4)
        lags = {t.name: world.lag_of[u] for u, t in enumerate(world.tasks) if t.name in held}
        assert lags == want, report


@given(before=st.sampled_from([2, 4, 8]), shrink=st.sampled_from([1, 2, 4]),
       standbys=st.sampled_from([1, 2]), lost=st.sampled_from([None, "p1", "p3"]),
       everything=st.booleans(), data=st.data())
def test_lags_read_from_the_copy_holders_follow_their_definition(
    before: int, shrink: int, standbys: int, lost: str | None, everything: bool,
    data: st.DataObject
) -> None:
    # Reports that name only copies their processor held, standbys among them, take the
    # path that finds a task's reporters among its lineage's copy holders (after a merge
    # too, where a holder of both children is known as far behind as the furthest).
    previous = generate_job_model(1, INPUTS, GroupByPartition(), before, PROCS,
                                  stateful=True,
                                  params=AssignmentParams(num_standbys=standbys)).job_model
    after = max(1, before // shrink)
    new = generate_job_model(2, INPUTS, GroupByPartition(), after, PROCS, previous=previous,
                             stateful=True).job_model
    reports: dict[str, dict[str, int]] = {}
    for pid, container in previous.containers.items():
        report = reports[pid] = {}
        for copy in container.tasks:
            standby = parse_standby_task_name(copy)
            if everything or data.draw(st.booleans(), label=f"{pid} reports {copy}"):
                report[standby[0] if standby else copy] = data.draw(lag_values)
    live = {pid: loc for pid, loc in PROCS.items() if pid != lost}
    world = World(list(new.active_tasks().values()), live, previous, {}, reports, True,
                  AssignmentParams(), after)
    for u, task in enumerate(world.tasks):
        want = expected_lags(previous, after, task.name, task.key_bucket,
                             task.partition_group, reports, live)
        assert world.lag_of[u] == want, task.name
        assert world.good[u] == expected_good(want), task.name
