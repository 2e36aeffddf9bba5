"""The assignment: stateful actives, standbys and warm-ups, then stateless actives."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import compress
from types import MappingProxyType

from grouping.assignment.params import (
    UNKNOWN_LAG,
    AssignmentParams,
    AssignmentResult,
    AssignmentTrace,
)
from grouping.assignment.placer import Placer
from grouping.assignment.world import World
from grouping.model import ContainerModel, JobModel, TaskMode, TaskModel
from grouping.task_names import standby_task_name


def assign_tasks(
    tasks: Sequence[TaskModel],
    processors: Mapping[str, str],
    *,
    previous: JobModel | None = None,
    task_locality: Mapping[str, str] | None = None,
    task_lags: Mapping[str, Mapping[str, int]] | None = None,
    stateful: bool | AbstractSet[str] = frozenset(),
    params: AssignmentParams | None = None,
    elasticity_factor: int | None = None,
) -> AssignmentResult:
    """Assign active (and standby) copies of ``tasks`` to the live ``processors``.

    Args:
        tasks: the active task models of the new job model (names unique).
        processors: live processor id -> location id.
        previous: the previous job model (stickiness, standby holders, lineage).
        task_locality: task name -> location id where it last ran.
        task_lags: processor id -> {task name: lag in offsets}, as reported in heartbeats;
            a task a processor holds no state for is absent (unknown = not caught up).
        stateful: names of the tasks that have local state (True: every task).
        params: KIP-441 parameters.
        elasticity_factor: the factor ``tasks`` were grouped with (default: read from
            their names), used to follow lineage from the previous model.

    Returns:
        An :class:`AssignmentResult` with one container per live processor.
    """
    return assign_tasks_traced(
        tasks, processors, previous=previous, task_locality=task_locality,
        task_lags=task_lags, stateful=stateful, params=params,
        elasticity_factor=elasticity_factor)[0]


def assign_tasks_traced(
    tasks: Sequence[TaskModel],
    processors: Mapping[str, str],
    *,
    previous: JobModel | None = None,
    task_locality: Mapping[str, str] | None = None,
    task_lags: Mapping[str, Mapping[str, int]] | None = None,
    stateful: bool | AbstractSet[str] = frozenset(),
    params: AssignmentParams | None = None,
    elasticity_factor: int | None = None,
    leftovers: list[object] | None = None,
) -> tuple[AssignmentResult, AssignmentTrace | None]:
    """:func:`assign_tasks`, and its trace (None when there is no live processor). The
    indexed inputs and the placers go to ``leftovers`` when given, for the caller to free
    later (100k tasks: 10 ms of freeing)."""
    params = params or AssignmentParams()
    w = World(tasks, processors, previous, task_locality or {}, task_lags or {},
               stateful, params, elasticity_factor)
    if w.m == 0:
        return AssignmentResult(MappingProxyType({}), False), None

    # every task stateful (a stateful job) or none: unit k is task k, no selections
    n_stateful = w.is_stateful.count(True)
    every, none = n_stateful == w.n, n_stateful == 0
    stateful_units = (list(range(w.n)) if every else [] if none
                      else list(compress(range(w.n), w.is_stateful)))
    stateless_units = (list(range(w.n)) if none else [] if every
                       else list(compress(range(w.n), map(operator.not_, w.is_stateful))))
    target = [-1] * w.n
    active_load = [0] * w.m

    # 1. Stateful actives: balanced, lag-aware target; actives only on caught-up processors.
    if stateful_units:
        placer = Placer(w, stateful_units,
                        w.sticky if every else [w.sticky[u] for u in stateful_units],
                        [0] * w.m, lag_aware=True)
        place = placer.run()
        if leftovers is not None:
            leftovers.append(placer)
        if every:
            target = place  # the placer is done with it
        else:
            for u, j in zip(stateful_units, place, strict=True):
                target[u] = j
        for j, count in Counter(place).items():
            active_load[j] = count
    # actives stay on their target where it is caught up; the others move there later
    active = target[:]
    good = w.good
    moving = [u for u in stateful_units
              if (good_u := good[u]) is not None and target[u] not in good_u]
    for u in moving:
        active[u] = -1
        active_load[target[u]] -= 1
    # warm-ups already under way first, then the tasks with the fewest caught-up choices
    moving.sort(key=lambda u: (_state_at_target(w, u, target[u]), _n_good(w, u), u))
    for u in moving:
        active[u] = _best_caught_up(w, u, active_load)
        active_load[active[u]] += 1

    # 2. Standbys for stateful tasks, then warm-ups for the moves the targets want.
    # only tasks with standby or warm-up copies have an entry (most have none)
    standbys: dict[int, list[int]] = (
        {u: [] for u in stateful_units} if params.num_standbys > 0 else {})
    warmups: set[tuple[int, int]] = set()
    budget = params.max_warmup_replicas
    movements: dict[str, str] = {}
    for u in moving:
        movements[w.names[u]] = w.pids[target[u]]
    if params.num_standbys > 0 and stateful_units:
        _place_standbys(w, stateful_units, active, target, standbys)
    # a warm-up that doubles as a standby is still a warm-up: the probing rebalance
    # that moves the active there waits for it to catch up (Probing.probe_if_warm)
    doubled: list[tuple[int, int]] = []
    for u in moving:
        wanted = min(params.num_standbys, w.m - 1)
        if len(standbys.get(u, ())) < wanted:
            standbys.setdefault(u, []).append(target[u])  # the warm-up doubles as a standby
            doubled.append((u, target[u]))
        elif budget > 0:
            budget -= 1
            warmups.add((u, target[u]))
    standby_moves = 0
    if params.num_standbys > 0:
        lag_of, acceptable = w.lag_of, params.acceptable_recovery_lag
        for u in stateful_units:
            # (only the copy at idx is ever replaced: no need to iterate over a copy)
            for idx, j in enumerate(standbys[u]):
                lag = lag_of[u].get(j)  # w.rank(u, j) == 0, inlined: 100k copies
                if (lag is not None and lag <= acceptable) or j == target[u]:
                    continue
                holders = {active[u], target[u], *standbys[u]}
                holders.update(j2 for u2, j2 in warmups if u2 == u)
                rank_j = w.rank(u, j)
                better = [q for q in w.lag_of[u] if q not in holders and w.rank(u, q) < rank_j]
                if not better:
                    continue
                standby_moves += 1
                q = min(better, key=lambda q: (w.rank(u, q), q))
                standbys[u][idx] = q
                if budget > 0:
                    budget -= 1
                    warmups.add((u, j))

    # 3. Stateless actives, balanced on top of the stateful load.
    if stateless_units:
        placer = Placer(w, stateless_units,
                        w.sticky if none else [w.sticky[u] for u in stateless_units],
                        active_load, lag_aware=False)
        if none:
            active = placer.run()
        else:
            for u, j in zip(stateless_units, placer.run(), strict=True):
                active[u] = j
        if leftovers is not None:
            leftovers.append(placer)

    containers = _containers(w, active, standbys, warmups)
    if leftovers is not None:
        leftovers += (w, stateful_units, stateless_units, target, standbys)
    return AssignmentResult(
        containers,
        bool(moving) or standby_moves > 0,
        frozenset((w.names[u], w.pids[j]) for u, j in (*warmups, *doubled)),
        MappingProxyType(movements),
    ), AssignmentTrace(w.tasks, w.pids, active, w.group, w.is_stateful)



def _n_good(w: World, u: int) -> int:
    good = w.good[u]
    return w.m if good is None else len(good)


def _state_at_target(w: World, u: int, j: int) -> bool:
    """False first: a target that already holds some state continues its warm-up first."""
    return j not in w.lag_of[u]


def _best_caught_up(w: World, u: int, active_load: list[int]) -> int:
    """The caught-up processor for u's active: previous owner, then location, then load."""
    good = w.good[u]
    assert good is not None
    sticky, loc = w.sticky[u], w.locality[u]
    if sticky in good:
        return sticky
    return min(good, key=lambda q: (w.location[q] != loc, active_load[q], q))


def _place_standbys(
    w: World,
    stateful_units: list[int],
    active: list[int],
    target: list[int],
    standbys: dict[int, list[int]],
) -> None:
    """num_standbys copies per stateful task, balanced, sticky to processors with state."""
    unit_task: list[int] = []
    sticky: list[int] = []
    wanted, m = w.params.num_standbys, w.m
    for u in stateful_units:
        a, t = active[u], target[u]
        copies = min(wanted, m - (1 if a == t else 2))
        if copies <= 0:
            continue
        holders = _state_holders(w, u, a, t, copies)
        if copies == 1:
            unit_task.append(u)
            sticky.append(holders[0] if holders else -1)
            continue
        for r in range(copies):
            unit_task.append(u)
            sticky.append(holders[r] if r < len(holders) else -1)
    if not unit_task:
        return

    def exclusions(k: int) -> Sequence[int]:
        u = unit_task[k]
        return [active[u], target[u]]

    make = _one_copy_placer if w.params.num_standbys == 1 else _tracking_placer
    placer = make(w, unit_task, sticky, active, target, exclusions)
    for k, j in enumerate(placer.run()):
        standbys[unit_task[k]].append(j)


def _tracking_placer(w: World, unit_task: list[int], sticky: list[int], active: list[int],
                     target: list[int], exclusions: Callable[[int], Sequence[int]]) -> Placer:
    """The standby placer for any number of copies per task: it tracks where each task's
    copies are as they are placed and moved, so that no two share a processor."""
    copies_of: dict[int, set[int]] = {u: {active[u], target[u]} for u in set(unit_task)}

    def excluded(k: int, j: int) -> bool:
        return j in copies_of[unit_task[k]]

    def avoid(k: int) -> AbstractSet[str]:
        return {w.location[j] for j in copies_of[unit_task[k]]}

    def placed(k: int, j: int) -> None:
        copies_of[unit_task[k]].add(j)

    def removed(k: int, j: int) -> None:
        copies_of[unit_task[k]].discard(j)

    return Placer(w, unit_task, sticky, [0] * w.m, lag_aware=False, excluded=excluded,
                  exclusions=exclusions, avoid_locations=avoid, group_cohesion=False,
                  on_place=placed, on_remove=removed, prefer_state=True)


def _one_copy_placer(w: World, unit_task: list[int], sticky: list[int], active: list[int],
                     target: list[int], exclusions: Callable[[int], Sequence[int]]) -> Placer:
    """The standby placer when each task has one standby copy (one unit): the copies a
    unit must avoid are its task's active and target alone. (The general placer tracks
    every placed copy of a task; a unit is never checked against its own place, so with
    one unit per task that tracking changes nothing, and cost a set per task.)"""
    location = w.location

    def excluded(k: int, j: int) -> bool:
        u = unit_task[k]
        return j == active[u] or j == target[u]

    def avoid(k: int) -> AbstractSet[str]:
        u = unit_task[k]
        return {location[active[u]], location[target[u]]}

    return Placer(w, unit_task, sticky, [0] * w.m, lag_aware=False, excluded=excluded,
                  exclusions=exclusions, avoid_locations=avoid, group_cohesion=False,
                  prefer_state=True)


def _state_holders(w: World, u: int, active: int, target: int, count: int) -> list[int]:
    """Up to ``count`` processors other than ``active`` and ``target`` that held a copy of
    u (or its lineage) before: most caught up first, then previous standby holders before
    a previous active owner (so standbys stay put)."""
    owner_pids, standby_pids = w.copy_holders(u)
    alive = w.pid_index
    if len(owner_pids) == 1 and len(standby_pids) <= 1:  # one copy each: the usual case
        j1 = alive.get(owner_pids[0], -1)
        j2 = alive.get(standby_pids[0], -1) if standby_pids else -1
        ok1 = j1 >= 0 and j1 not in (active, target)
        ok2 = j2 >= 0 and j2 not in (active, target)
        if not (ok1 and ok2 and j1 != j2):
            return [j1] if ok1 else [j2] if ok2 else []
    # ranked by (lag rank, not a standby holder, index); a processor that held both an
    # active and a standby copy counts as a standby holder (met first)
    lags = w.lag_of[u]
    keys: dict[int, tuple[int, bool, int]] = {}
    for holder_pids, owner in ((standby_pids, False), (owner_pids, True)):
        for pid in holder_pids:
            j = alive.get(pid, -1)
            if j < 0 or j in (active, target) or j in keys:
                continue
            keys[j] = (lags.get(j, UNKNOWN_LAG), owner, j)  # (w.rank(u, j), ...) inlined
    if count == 1:
        return [min(keys.values())[2]] if keys else []
    return [key[2] for key in sorted(keys.values())[:count]]


def _containers(
    w: World,
    active: list[int],
    standbys: Mapping[int, list[int]],
    warmups: AbstractSet[tuple[int, int]],
) -> Mapping[str, ContainerModel]:
    per_proc: list[list[TaskModel]] = [[] for _ in range(w.m)]
    for task, j in zip(w.tasks, active, strict=True):
        per_proc[j].append(task)
    extra: dict[int, list[int]] = {}
    for u, j in sorted(warmups):
        extra.setdefault(u, []).append(j)
    # in any order: a container keys its tasks by name, sorted (ContainerModel.of)
    make, task_type, standby = tuple.__new__, TaskModel, TaskMode.STANDBY
    tasks = w.tasks
    for u, placed in standbys.items():
        more = extra.pop(u, None)
        copies = placed + more if more else placed
        if not copies:
            continue
        name, ssps, changelog, _, bucket, group = tasks[u]
        for replica, j in enumerate(copies):
            # task.with_mode(STANDBY, standby_task_name(name, replica)), for 100k copies
            per_proc[j].append(make(task_type, (f"Standby-{name}-{replica}", ssps, changelog,
                                                standby, bucket, group)))
    for u, copies in extra.items():
        task = tasks[u]
        for replica, j in enumerate(copies):
            per_proc[j].append(
                task.with_mode(TaskMode.STANDBY, standby_task_name(task.name, replica)))
    return MappingProxyType({
        pid: ContainerModel.of(pid, w.location[j], per_proc[j])
        for j, pid in enumerate(w.pids)
    })
