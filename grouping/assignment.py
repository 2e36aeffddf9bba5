"""Task -> processor assignment: host affinity (SAMZA-1554) and lag awareness (KIP-441).

One pure function, :func:`assign_tasks`, maps (tasks, live processors, previous job model,
task locality, task lags, which tasks are stateful, params) to container models with
active and standby tasks, and says whether a probing rebalance is wanted.

How it decides, in order:

1. **Stickiness.** Every task has a *sticky owner*: the live processor that ran it (or, after
   an elasticity change, its parent or most of its children) in the previous job model.
2. **Balanced targets.** Per processor, a target count within ``balance_factor`` of every
   other processor is chosen to keep as many tasks on their sticky owner as balance allows
   (:func:`window_targets`; this is also the lower bound on moves).
3. **Keep, then place.** A processor over its target gives up the tasks that are easiest to
   place elsewhere and least tied to the partition groups it holds. Each remaining task goes,
   in order of preference, to a processor at its last location, to a processor already
   holding other buckets of its partition (SEP-32 optimisation 1), or to the least loaded
   processor (ties: smallest processor id).
4. **Lag.** For a stateful task only processors that are *caught up* (lag <=
   ``acceptable_recovery_lag``; if none is, those with the smallest known lag; if no lag is
   known, all) may run the active. The balanced target prefers them, and frees a slot on
   one by moving another of its tasks to a caught-up peer when that keeps balance. Where
   balance still needs a processor that is not caught up, the active stays on a caught-up
   one (previous owner first), the target gets a *warm-up* standby (at most
   ``max_warmup_replicas`` at once) and a probing rebalance is requested. Standbys
   (``num_standbys``) go to processors other than the active, preferring those that hold
   state and other locations; a standby whose target is not caught up stays where a more
   caught-up copy is and warms up the target.

Everything iterates in sorted order (tasks by name, processors by id), so the same input
gives the same output, and a balanced assignment fed back unchanged is returned unchanged.
"""

from __future__ import annotations

import heapq
import operator
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import compress, islice
from operator import attrgetter
from types import MappingProxyType

from grouping.errors import GroupingError, InvalidAssignmentParams
from grouping.lineage import NO_HISTORY, GroupHistory, PreviousAssignment
from grouping.model import ContainerModel, JobModel, TaskMode, TaskModel
from grouping.task_names import elasticity_factor_of, standby_task_name

#: Rank of a processor that reported no lag for a task: behind every known lag.
UNKNOWN_LAG = sys.maxsize


@dataclass(frozen=True, slots=True)
class AssignmentParams:
    """KIP-441 parameters (same names and defaults as the KIP)."""

    balance_factor: int = 1
    acceptable_recovery_lag: int = 10_000
    num_standbys: int = 0
    max_warmup_replicas: int = 2

    def __post_init__(self) -> None:
        if self.balance_factor < 1:
            raise InvalidAssignmentParams(
                f"balance_factor must be at least 1, got {self.balance_factor}"
            )
        if self.acceptable_recovery_lag < 0:
            raise InvalidAssignmentParams(
                f"acceptable_recovery_lag must be at least 0, got {self.acceptable_recovery_lag}"
            )
        if self.num_standbys < 0:
            raise InvalidAssignmentParams(
                f"num_standbys must be at least 0, got {self.num_standbys}"
            )
        if self.max_warmup_replicas < 1:
            raise InvalidAssignmentParams(
                f"max_warmup_replicas must be at least 1, got {self.max_warmup_replicas}"
            )


@dataclass(frozen=True, slots=True)
class AssignmentResult:
    """Container models for every live processor, and what the assignment still wants.

    ``warmups`` are (active task, processor) pairs holding a warm-up standby copy.
    ``movements`` maps stateful tasks whose active could not yet go to its balanced target
    (the target is not caught up) to that target processor.
    """

    containers: Mapping[str, ContainerModel]
    probing_rebalance_needed: bool
    warmups: frozenset[tuple[str, str]] = frozenset()
    movements: Mapping[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------
# Balanced targets


@dataclass(frozen=True, slots=True)
class WindowTargets:
    """Per-processor bounds for one class of tasks.

    Processor j gets at least ``floor[j]`` and at most ``cap[j]`` tasks, and ``pool`` more
    tasks than ``sum(floor)`` are handed out in all. ``kept`` is how many tasks can stay on
    their sticky owner.
    """

    floor: tuple[int, ...]
    cap: tuple[int, ...]
    pool: int
    kept: int


def window_targets(
    keep_counts: Sequence[int], base: Sequence[int], total: int, balance_factor: int
) -> WindowTargets:
    """Targets that keep the most tasks in place with loads within ``balance_factor``.

    ``keep_counts[j]`` tasks could stay on processor j; ``base[j]`` is load j already has
    from another class of tasks (e.g. stateful actives when placing stateless ones).
    Final loads ``base[j] + x[j]`` lie in one window ``[L, L + balance_factor]``, except
    that a processor whose base alone exceeds the window gets nothing. Among windows, the
    one keeping most tasks wins; ties go to the higher (more even) window.
    """
    m = len(keep_counts)
    if m == 0:
        raise GroupingError("cannot balance tasks over zero processors")
    b = balance_factor
    ordered = sorted(base)
    prefix = [0]
    for x in ordered:
        prefix.append(prefix[-1] + x)

    def fill(level: int) -> int:
        # sum over j of max(0, level - base[j]): tasks needed to lift everyone to `level`.
        lo, hi = 0, m
        while lo < hi:
            mid = (lo + hi) // 2
            if ordered[mid] < level:
                lo = mid + 1
            else:
                hi = mid
        return level * lo - prefix[lo]

    def lowest_level_reaching(amount: int) -> int:
        lo, hi = ordered[0], ordered[0] + amount + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if fill(mid) >= amount:
                hi = mid
            else:
                lo = mid + 1
        return lo

    level_hi = lowest_level_reaching(total + 1) - 1  # max L with fill(L) <= total
    level_lo = lowest_level_reaching(total) - b  # min L with fill(L + b) >= total
    best: WindowTargets | None = None
    for level in range(level_hi, level_lo - 1, -1):
        # max/min spelled as conditional expressions: no call per processor (1000s)
        top = level + b
        lo_j = [level - x if x < level else 0 for x in base]
        hi_j = [top - x if x < top else 0 for x in base]
        want = [lo if k < lo else hi if k > hi else k
                for k, lo, hi in zip(keep_counts, lo_j, hi_j, strict=True)]
        excess = sum(want) - total
        if excess > 0:
            # Take the excess from the most loaded processors that are above their floor.
            heap = [(-(base[j] + want[j]), j) for j in range(m) if want[j] > lo_j[j]]
            heapq.heapify(heap)
            while excess > 0:
                _, j = heapq.heappop(heap)
                want[j] -= 1
                excess -= 1
                if want[j] > lo_j[j]:
                    heapq.heappush(heap, (-(base[j] + want[j]), j))
            pool = 0
            cap = tuple(want)
        else:
            pool = -excess
            cap = tuple(hi_j)
        kept = sum([k if k < w else w for k, w in zip(keep_counts, want, strict=True)])
        if best is None or kept > best.kept:
            best = WindowTargets(tuple(want), cap, pool, kept)
    assert best is not None
    return best


# --------------------------------------------------------------------------------------
# Internal world: indices instead of names, for speed on 100k tasks.


class _World:
    """The inputs of one assignment, indexed: processors j = 0..m-1, tasks u = 0..n-1."""

    def __init__(
        self,
        tasks: Sequence[TaskModel],
        processors: Mapping[str, str],
        previous: JobModel | None,
        task_locality: Mapping[str, str],
        task_lags: Mapping[str, Mapping[str, int]],
        stateful: bool | AbstractSet[str],
        params: AssignmentParams,
        elasticity_factor: int | None,
    ) -> None:
        self.params = params
        self.pids = sorted(processors)
        self.m = len(self.pids)
        self.pid_index = {pid: j for j, pid in enumerate(self.pids)}
        self.location = [processors[pid] for pid in self.pids]
        self.tasks = sorted(tasks, key=attrgetter("name"))
        self.n = len(self.tasks)
        names = [t.name for t in self.tasks]
        if any(map(str.__eq__, names, islice(names, 1, None))):  # sorted: twins are adjacent
            raise GroupingError("task names must be unique")
        self.names = names
        factor = elasticity_factor or elasticity_factor_of(self.tasks)
        prev = PreviousAssignment.of(previous)
        self.prev = prev
        self.is_stateful = ([stateful] * self.n if isinstance(stateful, bool)
                            else [name in stateful for name in names])
        # lag_of[u]: processor -> known lag; good[u]: processors allowed to run u's active
        # (None: every processor, as for stateless tasks or when no lag is known anywhere)
        self.lag_of: list[Mapping[int, int]] = []
        self.good: list[tuple[int, ...] | None] = []
        any_stateful = any(self.is_stateful)
        own = _own_reports(task_lags, self.pid_index, previous) if any_stateful else None
        self.factor = factor
        self.histories: list[GroupHistory] = []
        self._trace(prev, factor, task_locality, own)
        if not any_stateful:
            self.lag_of, self.good = [{}] * self.n, [None] * self.n
        elif own is None:
            self.lag_of, self.good = self._lags(task_lags, params.acceptable_recovery_lag)

    def _trace(
        self,
        prev: PreviousAssignment,
        factor: int,
        task_locality: Mapping[str, str],
        own_reports: list[Mapping[str, int]] | None,
    ) -> None:
        """Partition group, lineage, sticky processor and last location of every task;
        with ``own_reports`` (every report names only tasks its processor ran before), the
        lags of stateful tasks too, read from their predecessors' owners."""
        group_ids: dict[object, int] = {}
        histories = self.histories
        self.group: list[int] = []
        self.lineage: list[tuple[str, ...]] = []
        self.sticky: list[int] = []
        group, lineage, sticky = self.group, self.lineage, self.sticky
        locality: list[str | None] = []
        lag_of, good = self.lag_of, self.good
        alive = self.pid_index
        prev_factor = prev.factor
        halved = prev_factor == factor << 1
        stateful = self.is_stateful if own_reports is not None else [False] * self.n
        reports_of: list[Mapping[str, int]] = own_reports or []
        empty: Mapping[int, int] = {}
        # shared read-only entries for the usual outcome, one processor caught up at lag 0
        alone = [(j,) for j in range(self.m)]
        at_zero: list[Mapping[int, int]] = [{j: 0} for j in range(self.m)]
        before, owners, _ = NO_HISTORY
        last_group: object = None
        g = -1
        # One pass over every task (100k and more): the rules of PreviousAssignment.lineage
        # and sticky_owner, inlined; a property test checks that they agree.
        for u, t in enumerate(self.tasks):
            pg = t.partition_group
            if pg is not last_group:  # tasks of one group come together, often one object
                last_group = pg
                found = group_ids.get(pg)
                if found is None:
                    found = group_ids[pg] = len(group_ids)
                    histories.append(prev.history_of(pg))
                g = found
                before, owners, _ = histories[g]
            group.append(g)
            bucket = t.key_bucket if t.key_bucket > 0 else 0
            lin: tuple[str, ...] = ()
            j = -1
            lag: int | None = None  # the lag on j, when j reported all of lin
            if prev_factor <= factor:  # the same tasks, or a split: one predecessor
                parent_bucket = bucket & (prev_factor - 1)
                parent = before.get(parent_bucket)
                if parent is not None:
                    lin, j = (parent.name,), alive.get(owners[parent_bucket], -1)
                    if j >= 0 and stateful[u]:
                        lag = reports_of[j].get(parent.name)
            elif halved:  # two children: most children, ties to the smaller processor
                c1, c2 = before.get(bucket), before.get(bucket + factor)
                if c1 is not None and c2 is not None:
                    lin = (c1.name, c2.name)
                    j1 = alive.get(owners[bucket], -1)
                    j2 = alive.get(owners[bucket + factor], -1)
                    if j1 == j2:
                        j = j1
                        if j >= 0 and stateful[u]:
                            report = reports_of[j]
                            l1, l2 = report.get(c1.name), report.get(c2.name)
                            if l1 is not None and l2 is not None:
                                lag = l1 if l1 > l2 else l2
                    else:
                        j = j2 if j1 < 0 else j1 if j2 < 0 else min(j1, j2)
                elif c1 is not None or c2 is not None:
                    child_bucket = bucket if c1 is not None else bucket + factor
                    name = before[child_bucket].name
                    lin, j = (name,), alive.get(owners[child_bucket], -1)
                    if j >= 0 and stateful[u]:
                        lag = reports_of[j].get(name)
            else:  # a deeper merge: the processor holding most children (ties: smallest)
                buckets = [c for c in range(bucket, prev_factor, factor) if c in before]
                lin = tuple(before[c].name for c in buckets)
                counts: dict[int, int] = {}
                for c in buckets:
                    jc = alive.get(owners[c], -1)
                    if jc >= 0:
                        counts[jc] = counts.get(jc, 0) + 1
                if counts:
                    top = max(counts.values())
                    j = min(jc for jc, c in counts.items() if c == top)
                    if stateful[u] and counts[j] == len(buckets):
                        child_lags = [reports_of[j].get(name) for name in lin]
                        if None not in child_lags:
                            lag = max(child_lags)  # type: ignore[type-var]
            if not lin:  # a group the previous model did not have: the same name
                owner = prev.owner.get(t.name)
                if owner is not None:
                    lin, j = (t.name,), alive.get(owner, -1)
                    if j >= 0 and stateful[u]:
                        lag = reports_of[j].get(t.name)
            lineage.append(lin)
            sticky.append(j)
            if task_locality:
                loc = task_locality.get(t.name)
                if loc is None:
                    for ancestor in lin:
                        loc = task_locality.get(ancestor)
                        if loc is not None:
                            break
                locality.append(loc)
            if own_reports is None:
                continue
            if lag is None:
                lag_of.append(empty)
                good.append(None)
            else:
                lag_of.append(at_zero[j] if lag <= 0 else {j: lag})
                good.append(alone[j])
        self.locality = locality if task_locality else [None] * self.n

    def copy_holders(self, u: int) -> tuple[list[str], list[str]]:
        """The processors that held a copy of u's lineage in the previous model: the
        active owners, and the standby (or warm-up) holders; read from u's group history,
        or by task name when its group is new."""
        history = self.histories[self.group[u]]
        owners, standbys = history.owners, history.standbys
        owner_pids: list[str] = []
        standby_pids: list[str] = []
        for b in self.prev.overlapping_buckets(self.tasks[u].key_bucket, self.factor):
            pid = owners.get(b)
            if pid is not None:
                owner_pids.append(pid)
                standby_pids += standbys.get(b, ())
        if owner_pids:
            return owner_pids, standby_pids
        by_name = self.prev.owner
        names = [name for name in self.lineage[u] if name in by_name]
        return ([by_name[name] for name in names],
                [pid for name in names for pid in self.prev.standby_holders.get(name, ())])

    def _lags(self, task_lags: Mapping[str, Mapping[str, int]], acceptable: int
              ) -> tuple[list[Mapping[int, int]], list[tuple[int, ...] | None]]:
        """Per stateful task, processor -> known lag, and the processors good enough to run
        its active: a task's state is its lineage's (a split child's is its parent's; a
        merged task is as far behind as its furthest child, and known only where every
        child was reported); a task without lineage has only its own reports."""
        # Index the reporter of each task in one flat dict built in bulk (in C), reading
        # lags from the processors' own reports; tasks with several reporters (standbys)
        # go to ``many``.
        reports_of: list[Mapping[str, int]] = [{} for _ in range(self.m)]
        one_j: dict[str, int] = {}
        many: dict[str, dict[int, int]] = {}
        reported = 0
        for pid in sorted(task_lags):
            j = self.pid_index.get(pid)
            if j is not None and task_lags[pid]:
                reports_of[j] = task_lags[pid]
                one_j.update(dict.fromkeys(task_lags[pid], j))
                reported += len(task_lags[pid])
        if len(one_j) != reported:  # some task has several reporters: index exactly
            one_j.clear()
            for j, reports in enumerate(reports_of):
                for name, lag in reports.items():
                    clamped = lag if lag > 0 else 0
                    if name in many:
                        many[name][j] = clamped
                    elif name in one_j:
                        first = one_j.pop(name)
                        first_lag = reports_of[first][name]
                        many[name] = {first: first_lag if first_lag > 0 else 0, j: clamped}
                    else:
                        one_j[name] = j
        empty: dict[int, int] = {}

        def of(name: str) -> dict[int, int] | None:
            found = many.get(name)
            if found is not None:
                return found
            j = one_j.get(name)
            if j is None:
                return None
            lag = reports_of[j][name]
            return {j: lag if lag > 0 else 0}

        lag_of: list[Mapping[int, int]] = []
        good: list[tuple[int, ...] | None] = []
        for name, stateful, lin in zip(self.names, self.is_stateful, self.lineage,
                                       strict=True):
            if not stateful:
                lag_of.append(empty)
                good.append(None)
                continue
            sources = lin or (name,)
            lags = (of(sources[0]) or empty) if len(sources) == 1 else _merged_lags(
                [of(child) for child in sources])
            lag_of.append(lags)
            good.append(_good_among(lags, acceptable))
        return lag_of, good

    def rank(self, u: int, j: int) -> int:
        """0 when caught up, else the lag; UNKNOWN_LAG when j reported none."""
        lag = self.lag_of[u].get(j)
        if lag is None:
            return UNKNOWN_LAG
        return 0 if lag <= self.params.acceptable_recovery_lag else lag


class _LoadQueue:
    """Processors ordered by (load, index), lazily updated: stale entries are skipped."""

    __slots__ = ("_heap", "_load")

    def __init__(self, members: Iterable[int], load: list[int]) -> None:
        self._load = load
        self._heap = [(load[j], j) for j in members]
        heapq.heapify(self._heap)

    def touch(self, j: int) -> None:
        heapq.heappush(self._heap, (self._load[j], j))

    def best(
        self,
        open_: Callable[[int], bool],
        eligible: Callable[[int], bool] | None,
        prefer: Callable[[int], bool] | None = None,
        scan: int = 32,
    ) -> int:
        """Least loaded open processor eligible for the task, or -1.

        With ``prefer``, the least loaded preferred processor among the first ``scan``
        eligible ones wins, else the least loaded eligible one.
        """
        heap, load = self._heap, self._load
        aside: list[tuple[int, int]] = []
        first = -1
        found = -1
        seen = 0
        while heap:
            lj, j = heap[0]
            if lj != load[j] or not open_(j):
                heapq.heappop(heap)  # stale, or full for good: slots never reopen
                continue
            aside.append(heapq.heappop(heap))
            if eligible is not None and not eligible(j):
                continue
            if first < 0:
                first = j
            if prefer is None or prefer(j):
                found = j
                break
            seen += 1
            if seen >= scan:
                break
        for entry in aside:
            heapq.heappush(heap, entry)
        return found if found >= 0 else first


class _Slots:
    """How many more tasks each processor may take under a :class:`WindowTargets`."""

    __slots__ = ("assigned", "base", "cap", "floor", "load", "pool")

    def __init__(self, targets: WindowTargets, base: Sequence[int]) -> None:
        self.floor = targets.floor
        self.cap = targets.cap
        self.pool = targets.pool
        self.base = list(base)
        self.assigned = [0] * len(base)
        self.load = list(base)

    def open(self, j: int) -> bool:
        a = self.assigned[j]
        return a < self.floor[j] or (a < self.cap[j] and self.pool > 0)

    def take(self, j: int) -> None:
        if self.assigned[j] >= self.floor[j]:
            self.pool -= 1
        self.assigned[j] += 1
        self.load[j] += 1

    def take_many(self, j: int, count: int) -> None:
        """take(j), ``count`` times."""
        assigned = self.assigned[j]
        beyond_floor = assigned + count - max(assigned, self.floor[j])
        if beyond_floor > 0:
            self.pool -= beyond_floor
        self.assigned[j] = assigned + count
        self.load[j] += count

    def release(self, j: int) -> None:
        """Undo one take() on j."""
        self.assigned[j] -= 1
        self.load[j] -= 1
        if self.assigned[j] >= self.floor[j]:
            self.pool += 1

    def force(self, j: int) -> None:
        """Raise j's target by one, so that the next take() on j fits beyond the window."""
        self.floor = (*self.floor[:j], self.floor[j] + 1, *self.floor[j + 1:])
        self.cap = (*self.cap[:j], max(self.cap[j], self.floor[j]), *self.cap[j + 1:])


# --------------------------------------------------------------------------------------
# Placement of one class of tasks


class _Placer:
    """Balanced, sticky placement of a list of units (task copies) over processors.

    ``unit_task[k]`` is the task index of unit k; ``sticky[k]`` its sticky processor or -1;
    ``excluded(k, j)`` forbids a processor (another copy of the task is there);
    ``lag_aware`` makes caught-up processors preferred (stateful actives);
    ``avoid_locations(k)`` names locations to avoid when possible (standbys);
    ``prefer_state`` sends a unit that cannot stay where it was to a processor that already
    holds some state of its task, when one has room (standbys: a warm-up from the last
    round becomes the standby, instead of starting another warm-up elsewhere).
    """

    def __init__(
        self,
        world: _World,
        unit_task: Sequence[int],
        sticky: Sequence[int],
        base: Sequence[int],
        *,
        lag_aware: bool,
        excluded: Callable[[int, int], bool] | None = None,
        exclusions: Callable[[int], Sequence[int]] | None = None,
        avoid_locations: Callable[[int], AbstractSet[str]] | None = None,
        group_cohesion: bool = True,
        on_place: Callable[[int, int], None] | None = None,
        on_remove: Callable[[int, int], None] | None = None,
        prefer_state: bool = False,
    ) -> None:
        self.w = world
        self.prefer_state = prefer_state
        self.on_place = on_place
        self.on_remove = on_remove
        self.unit_task = unit_task
        self.sticky = sticky
        self.lag_aware = lag_aware
        self.excluded = excluded
        self.exclusions = exclusions
        self.avoid_locations = avoid_locations
        self.group_cohesion = group_cohesion
        m = world.m
        keep_lists: list[list[int]] = [[] for _ in range(m)]
        for k, s in enumerate(sticky):
            if s >= 0:
                keep_lists[s].append(k)
        self.targets = window_targets(
            [len(x) for x in keep_lists], base, len(unit_task), world.params.balance_factor
        )
        self.slots = _Slots(self.targets, base)
        self.place: list[int] = [-1] * len(unit_task)
        self.on_proc: list[list[int]] = [[] for _ in range(m)]
        self.group_procs: dict[int, dict[int, int]] = {}
        self._keep_lists = keep_lists
        # Load queues are built once the sticky units are kept (see _open_queues).
        self.all_queue = _LoadQueue((), self.slots.load)
        self.loc_queue: dict[str, _LoadQueue] = {}
        self.aug_budget = 50_000

    # -- bookkeeping

    def _assign(self, k: int, j: int) -> None:
        self.slots.take(j)
        self.place[k] = j
        self.on_proc[j].append(k)
        if self.group_cohesion:
            g = self.w.group[self.unit_task[k]]
            procs = self.group_procs.setdefault(g, {})
            procs[j] = procs.get(j, 0) + 1
        self.all_queue.touch(j)
        self.loc_queue[self.w.location[j]].touch(j)
        if self.on_place is not None:
            self.on_place(k, j)

    def _move(self, k: int, src: int, dst: int) -> None:
        """Move unit k from src to dst; src keeps its slot for the caller to refill."""
        self.on_proc[src].remove(k)
        if self.group_cohesion:
            procs = self.group_procs.setdefault(self.w.group[self.unit_task[k]], {})
            if procs.get(src, 0) > 1:
                procs[src] -= 1
            else:
                procs.pop(src, None)
        self.slots.release(src)
        if self.on_remove is not None:
            self.on_remove(k, src)
        self._assign(k, dst)

    def _eligible(self, k: int, j: int) -> bool:
        return self.excluded is None or not self.excluded(k, j)

    # -- the two phases

    def run(self) -> list[int]:
        orphans = self._keep()
        if self.lag_aware:
            # Caught-up placements first, so that a task no caught-up processor can take
            # (it will get a warm-up) does not use up a slot a caught-up task needs.
            deferred = []
            for k in sorted(orphans, key=self._constraint_order):
                j = self._choose_caught_up(k)
                if j >= 0:
                    self._assign(k, j)
                else:
                    deferred.append(k)
            orphans = deferred
        for k in orphans:
            self._assign(k, self._choose(k))
        return self.place

    def _choose_caught_up(self, k: int) -> int:
        """An open caught-up processor for unit k (freeing one if needed), or -1."""
        w, slots = self.w, self.slots
        u = self.unit_task[k]
        good = w.good[u]
        if good is None:
            return self._choose(k)
        loc = w.locality[u]
        gp = self.group_procs.get(w.group[u], {})
        cands = [q for q in good if slots.open(q) and self._eligible(k, q)]
        if cands:
            load = slots.load
            return min(cands, key=lambda q: (w.location[q] != loc, q not in gp, load[q], q))
        return self._augment(k, good)

    def _constraint_order(self, k: int) -> tuple[int, int]:
        good = self.w.good[self.unit_task[k]]
        return (self.w.m if good is None else len(good), k)

    def _keep(self) -> list[int]:
        """Assign each processor the sticky units it keeps; return the rest, in unit order."""
        w, targets = self.w, self.targets
        floor = targets.floor
        # Processors with room after keeping their sticky units: alternatives for give-ups.
        room = [
            len(self._keep_lists[j]) < floor[j]
            or (targets.pool > 0 and len(self._keep_lists[j]) < targets.cap[j])
            for j in range(w.m)
        ]
        room_count = sum(room)
        orphans: list[int] = []
        for j in range(w.m):
            cands = self._keep_lists[j]
            limit = floor[j]
            if len(cands) > limit:
                ranked = sorted(self._give_up_order(j, cands, room, room_count))
                cands = [key[-1] for key in ranked[:limit]]
                orphans.extend(key[-1] for key in ranked[limit:])
            self._keep_all(j, cands)
        sticky = self.sticky
        orphans.extend(compress(range(len(sticky)), [s < 0 for s in sticky]))
        orphans.sort()
        self._open_queues(orphans)
        return orphans

    def _give_up_order(
        self, j: int, units: list[int], room: list[bool], room_count: int
    ) -> list[tuple[bool, bool, int, int]]:
        """Sort keys (unit last) for the sticky units of an overfull processor j: those
        given up first sort last. First to go: units j is not caught up on, then units
        another processor with room could take, then units of the partition groups j holds
        least of, then later units."""
        w, unit_task = self.w, self.unit_task
        group = w.group
        unit_group = [group[unit_task[k]] for k in units]
        held = Counter(unit_group) if self.group_cohesion else None
        good = w.good if self.lag_aware else None
        exclusions = self.exclusions
        # for a unit any processor may run (and no copy elsewhere to avoid): j alone aside
        free_alternative = room_count - (1 if room[j] else 0) > 0
        keys: list[tuple[bool, bool, int, int]] = []
        append = keys.append
        for k, g in zip(units, unit_group, strict=True):
            cohesion_rank = 0 if held is None else -held[g]
            gd = None if good is None else good[unit_task[k]]
            if gd is None:
                if exclusions is None:
                    append((False, free_alternative, cohesion_rank, k))
                    continue
            elif len(gd) == 1 and gd[0] == j:  # caught up on j alone: nowhere else to go
                append((False, False, cohesion_rank, k))
                continue
            append((gd is not None and j not in gd,
                    self._has_alternative(k, j, room, room_count), cohesion_rank, k))
        return keys

    def _keep_all(self, j: int, units: list[int]) -> None:
        """Book ``units`` on j in bulk (no queue updates: the queues come after)."""
        self.slots.take_many(j, len(units))
        place = self.place
        for k in units:
            place[k] = j
        self.on_proc[j].extend(units)
        if self.on_place is not None:
            for k in units:
                self.on_place(k, j)

    def _open_queues(self, orphans: list[int]) -> None:
        """Build load queues and partition-group locations, needed only to place orphans."""
        w = self.w
        load = self.slots.load
        self.all_queue = _LoadQueue(range(w.m), load)
        by_loc: dict[str, list[int]] = {}
        for j, loc in enumerate(w.location):
            by_loc.setdefault(loc, []).append(j)
        self.loc_queue = {loc: _LoadQueue(js, load) for loc, js in by_loc.items()}
        if not self.group_cohesion or not orphans:
            return
        unit_group = list(map(w.group.__getitem__, self.unit_task))
        wanted = {unit_group[k] for k in orphans}
        place = self.place
        # only units of the orphans' groups (few, after a small change), picked out in C
        for k in compress(range(len(unit_group)), map(wanted.__contains__, unit_group)):
            j = place[k]
            if j >= 0:
                procs = self.group_procs.setdefault(unit_group[k], {})
                procs[j] = procs.get(j, 0) + 1

    def _has_alternative(self, k: int, j: int, room: list[bool], room_count: int) -> bool:
        """True when unit k could go to another processor that has room."""
        u = self.unit_task[k]
        good = self.w.good[u] if self.lag_aware else None
        if good is not None:
            return any(q != j and room[q] and self._eligible(k, q) for q in good)
        blocked = 0
        if self.exclusions is not None:
            blocked = sum(1 for q in set(self.exclusions(k)) if q != j and room[q])
        return room_count - (1 if room[j] else 0) - blocked > 0

    def _choose(self, k: int) -> int:
        w, slots = self.w, self.slots
        u = self.unit_task[k]
        load = slots.load
        if self.lag_aware and w.good[u] is not None:
            # No caught-up processor can take it: the target becomes a warm-up, best where
            # some state already is (a warm-up in progress), by smallest known lag.
            known = [q for q in w.lag_of[u] if slots.open(q) and self._eligible(k, q)]
            if known:
                return min(known, key=lambda q: (w.rank(u, q), load[q], q))

        if self.prefer_state and w.lag_of[u]:
            known = [q for q in w.lag_of[u] if slots.open(q) and self._eligible(k, q)]
            if known:
                avoid_here = self.avoid_locations(k) if self.avoid_locations else frozenset()
                return min(known, key=lambda q: (w.location[q] in avoid_here, w.rank(u, q),
                                                 load[q], q))

        def eligible(j: int) -> bool:
            return self._eligible(k, j)
        elig = eligible if self.excluded is not None else None
        loc = w.locality[u]
        if loc is not None and self.avoid_locations is None:
            q = self.loc_queue[loc].best(slots.open, elig) if loc in self.loc_queue else -1
            if q >= 0:
                return q
        if self.group_cohesion:
            gp = self.group_procs.get(w.group[u])
            if gp:
                cands = [q for q in gp if slots.open(q) and self._eligible(k, q)]
                if cands:
                    return min(cands, key=lambda q: (load[q], q))
        if self.avoid_locations is not None:
            avoid = self.avoid_locations(k)
            if avoid:
                q = self.all_queue.best(
                    slots.open, elig, prefer=lambda j: w.location[j] not in avoid)
                if q >= 0:
                    return q
        q = self.all_queue.best(slots.open, elig)
        if q >= 0:
            return q
        # Every open processor already holds a copy of this task: swap with a unit that can
        # go there, else exceed a target (balance gives way to "one copy per processor").
        q = self._swap_for(k)
        if q >= 0:
            return q
        cands = [j for j in range(w.m) if self._eligible(k, j)]
        if not cands:
            raise GroupingError(f"no processor can take a copy of task {w.names[u]!r}")
        q = min(cands, key=lambda j: (load[j], j))
        self.slots.force(q)
        return q

    def _swap_for(self, k: int) -> int:
        """Move a unit v from an eligible full processor q to an open processor p that v may
        use, so that k can take v's place on q. Returns q, or -1 when no swap exists."""
        w, slots = self.w, self.slots
        open_procs = [p for p in range(w.m) if slots.open(p)]
        for q in sorted(range(w.m), key=lambda j: (slots.load[j], j)):
            if not self._eligible(k, q):
                continue
            for v in self.on_proc[q]:
                if self.aug_budget <= 0:
                    return -1
                self.aug_budget -= 1
                for p in open_procs:
                    if p != q and self._eligible(v, p):
                        self._move(v, q, p)
                        return q
        return -1

    def _augment(self, k: int, good: tuple[int, ...]) -> int:
        """Free a slot on a caught-up processor of unit k by moving one of its units to a
        processor caught up on that unit which has room. Returns the freed processor or -1.

        Bounded: at most ``_AUGMENT_SCAN`` units per processor, newest first (units placed
        after the sticky ones), and ``aug_budget`` units per assignment."""
        w, slots = self.w, self.slots
        if self.aug_budget <= 0:
            return -1
        for p in sorted(good, key=lambda q: (slots.load[q], q)):
            if not self._eligible(k, p):
                continue
            units = self.on_proc[p]
            for v in units[: -_AUGMENT_SCAN - 1 : -1]:
                if self.aug_budget <= 0:
                    return -1
                self.aug_budget -= 1
                vgood = w.good[self.unit_task[v]]
                if vgood is None:
                    continue  # placed freely: moving it does not make the assignment better
                dst = [q for q in vgood if q != p and slots.open(q) and self._eligible(v, q)]
                if dst:
                    q = min(dst, key=lambda q: (slots.load[q], q))
                    self._move(v, p, q)
                    return p
        return -1


#: Units examined per processor when freeing a caught-up slot (see _Placer._augment).
_AUGMENT_SCAN = 256


# --------------------------------------------------------------------------------------
# The assignment


@dataclass(frozen=True, slots=True)
class AssignmentTrace:
    """What one assignment saw and decided, indexed (for :mod:`grouping.incremental`):
    the tasks sorted by name (task u), the live processors sorted by id (processor j),
    the processor of each task's active copy, each task's partition group id (ids in order
    of first appearance) and whether it is stateful."""

    tasks: Sequence[TaskModel]
    pids: Sequence[str]
    active: Sequence[int]
    group: Sequence[int]
    is_stateful: Sequence[bool]


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
) -> tuple[AssignmentResult, AssignmentTrace | None]:
    """:func:`assign_tasks`, and its trace (None when there is no live processor)."""
    params = params or AssignmentParams()
    w = _World(tasks, processors, previous, task_locality or {}, task_lags or {},
               stateful, params, elasticity_factor)
    if w.m == 0:
        return AssignmentResult(MappingProxyType({}), False), None

    stateful_units = list(compress(range(w.n), w.is_stateful))
    stateless_units = list(compress(range(w.n), map(operator.not_, w.is_stateful)))
    target = [-1] * w.n
    active_load = [0] * w.m

    # 1. Stateful actives: balanced, lag-aware target; actives only on caught-up processors.
    if stateful_units:
        placer = _Placer(w, stateful_units, [w.sticky[u] for u in stateful_units],
                         [0] * w.m, lag_aware=True)
        place = placer.run()
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
    for u in moving:
        wanted = min(params.num_standbys, w.m - 1)
        if len(standbys.get(u, ())) < wanted:
            standbys.setdefault(u, []).append(target[u])  # the warm-up doubles as a standby
        elif budget > 0:
            budget -= 1
            warmups.add((u, target[u]))
    standby_moves = 0
    if params.num_standbys > 0:
        for u in stateful_units:
            for idx, j in enumerate(list(standbys[u])):
                if w.rank(u, j) == 0 or j == target[u]:
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
        placer = _Placer(w, stateless_units, [w.sticky[u] for u in stateless_units],
                         active_load, lag_aware=False)
        for u, j in zip(stateless_units, placer.run(), strict=True):
            active[u] = j

    containers = _containers(w, active, standbys, warmups)
    return AssignmentResult(
        containers,
        bool(moving) or standby_moves > 0,
        frozenset((w.names[u], w.pids[j]) for u, j in warmups),
        MappingProxyType(movements),
    ), AssignmentTrace(w.tasks, w.pids, active, w.group, w.is_stateful)


def _own_reports(
    task_lags: Mapping[str, Mapping[str, int]],
    pid_index: Mapping[str, int],
    previous: JobModel | None,
) -> list[Mapping[str, int]] | None:
    """Each live processor's report (by processor index) when every report names only
    tasks its processor ran in ``previous`` (no standbys, the usual case): then a task's
    one possible reporter is its previous owner. None otherwise."""
    reports_of: list[Mapping[str, int]] = [{}] * len(pid_index)
    containers = previous.containers if previous is not None else {}
    for pid, report in task_lags.items():
        j = pid_index.get(pid)
        if j is None or not report:
            continue
        container = containers.get(pid)
        if container is None or not report.keys() <= container.tasks.keys():
            return None
        reports_of[j] = report
    return reports_of


def _merged_lags(children: list[dict[int, int] | None]) -> dict[int, int]:
    """A merged task is only as caught up as its least caught-up child, and known only
    on processors that reported every child."""
    if not children or None in children:
        return {}
    first, *rest = children
    merged: dict[int, int] = {}
    for j, lag in first.items():  # type: ignore[union-attr]
        worst = lag
        for other in rest:
            more = other.get(j)  # type: ignore[union-attr]
            if more is None:
                break
            worst = more if more > worst else worst
        else:
            merged[j] = worst
    return merged


def _good_among(lags: Mapping[int, int], acceptable: int) -> tuple[int, ...] | None:
    """The processors whose lag ranks best (caught up, or the least behind); None when no
    lag is known (every processor is as good as any other)."""
    if not lags:
        return None
    if len(lags) == 1:
        return tuple(lags)
    best = min(0 if lag <= acceptable else lag for lag in lags.values())
    return tuple(sorted(j for j, lag in lags.items()
                        if (0 if lag <= acceptable else lag) == best))


def _n_good(w: _World, u: int) -> int:
    good = w.good[u]
    return w.m if good is None else len(good)


def _state_at_target(w: _World, u: int, j: int) -> bool:
    """False first: a target that already holds some state continues its warm-up first."""
    return j not in w.lag_of[u]


def _best_caught_up(w: _World, u: int, active_load: list[int]) -> int:
    """The caught-up processor for u's active: previous owner, then location, then load."""
    good = w.good[u]
    assert good is not None
    sticky, loc = w.sticky[u], w.locality[u]
    if sticky in good:
        return sticky
    return min(good, key=lambda q: (w.location[q] != loc, active_load[q], q))


def _place_standbys(
    w: _World,
    stateful_units: list[int],
    active: list[int],
    target: list[int],
    standbys: dict[int, list[int]],
) -> None:
    """num_standbys copies per stateful task, balanced, sticky to processors with state."""
    unit_task: list[int] = []
    sticky: list[int] = []
    for u in stateful_units:
        blocked = {active[u], target[u]}
        copies = min(w.params.num_standbys, w.m - len(blocked))
        holders = _state_holders(w, u, blocked, copies) if copies > 0 else []
        for r in range(max(0, copies)):
            unit_task.append(u)
            sticky.append(holders[r] if r < len(holders) else -1)
    if not unit_task:
        return
    copies_of: dict[int, set[int]] = {u: {active[u], target[u]} for u in stateful_units}

    def excluded(k: int, j: int) -> bool:
        return j in copies_of[unit_task[k]]

    def exclusions(k: int) -> Sequence[int]:
        u = unit_task[k]
        return [active[u], target[u]]

    def avoid(k: int) -> AbstractSet[str]:
        return {w.location[j] for j in copies_of[unit_task[k]]}

    def placed(k: int, j: int) -> None:
        copies_of[unit_task[k]].add(j)

    def removed(k: int, j: int) -> None:
        copies_of[unit_task[k]].discard(j)

    placer = _Placer(w, unit_task, sticky, [0] * w.m, lag_aware=False,
                     excluded=excluded, exclusions=exclusions, avoid_locations=avoid,
                     group_cohesion=False, on_place=placed, on_remove=removed,
                     prefer_state=True)
    for k, j in enumerate(placer.run()):
        standbys[unit_task[k]].append(j)


def _state_holders(w: _World, u: int, blocked: AbstractSet[int], count: int) -> list[int]:
    """Up to ``count`` processors that held a copy of u (or its lineage) before: most
    caught up first, then previous standby holders before a previous active owner (so
    standbys stay put)."""
    owner_pids, standby_pids = w.copy_holders(u)
    alive = w.pid_index
    standby = {alive.get(pid, -1) for pid in standby_pids}
    holders = {alive.get(pid, -1) for pid in owner_pids}
    holders |= standby
    holders -= blocked
    holders.discard(-1)  # gone since
    if len(holders) <= 1:
        return list(holders)

    def rank(j: int) -> tuple[int, bool, int]:
        return (w.rank(u, j), j not in standby, j)

    if count == 1:
        return [min(holders, key=rank)]
    return sorted(holders, key=rank)[:count]


def _containers(
    w: _World,
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
    for u in sorted(standbys.keys() | extra.keys()):
        task = w.tasks[u]
        copies = list(standbys.get(u, ())) + extra.get(u, [])
        for replica, j in enumerate(copies):
            per_proc[j].append(
                task.with_mode(TaskMode.STANDBY, standby_task_name(task.name, replica)))
    return MappingProxyType({
        pid: ContainerModel.of(pid, w.location[j], per_proc[j])
        for j, pid in enumerate(w.pids)
    })
