"""The inputs of one assignment, indexed: processors j, tasks u, lineage, lags."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from itertools import islice
from operator import attrgetter, eq
from typing import NamedTuple

from grouping.assignment.ancestry import LastLocations, TaskLineage
from grouping.assignment.params import UNKNOWN_LAG, AssignmentParams
from grouping.errors import GroupingError
from grouping.lineage import NO_HISTORY, GroupHistory, PreviousAssignment
from grouping.model import JobModel, TaskModel
from grouping.task_names import elasticity_factor_of

# Internal world: indices instead of names, for speed on 100k tasks.

#: task u -> its last location (None: unknown), as a list or looked up on first read
Locations = list[str | None] | LastLocations


class World:
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
        if any(map(eq, names, islice(names, 1, None))):  # sorted: twins are adjacent
            raise GroupingError("task names must be unique")
        self.names = names
        factor = elasticity_factor or elasticity_factor_of(self.tasks)
        prev = PreviousAssignment.of(previous)
        self.prev = prev
        self.is_stateful = ([stateful] * self.n if isinstance(stateful, bool)
                            else [name in stateful for name in names])
        # lag_of[u]: processor -> known lag, as the assignment ranks it (0 when within
        # acceptable_recovery_lag, else the lag); good[u]: processors allowed to run u's
        # active (None: every processor, as for stateless tasks or when no lag is known)
        self.lag_of: list[Mapping[int, int]] = []
        self.good: list[tuple[int, ...] | None] = []
        any_stateful = any(self.is_stateful)
        own = (_own_reports(task_lags, self.pid_index, previous, params.acceptable_recovery_lag)
               if any_stateful else None)
        self.factor = factor
        self.histories: list[GroupHistory] = []
        self._overlapping: dict[int, tuple[int, ...]] = {}  # key bucket -> previous buckets
        # task -> the processors holding copies of its lineage (owners, standby holders),
        # when the lag pass found them
        self._holders: dict[int, tuple[list[str], list[str]]] = {}
        self.any_locality = bool(task_locality)  # else every task's is None
        # per task: partition group, sticky processor; lineage and last location (read
        # on demand after a previous model)
        self.group: list[int] = []
        self.sticky: list[int] = []
        self.lineage: TaskLineage
        self.locality: Locations = []
        if previous is None:
            self._no_history(task_locality, own)
        else:
            self._trace(prev, factor, task_locality, own)
        if not any_stateful:
            self.lag_of, self.good = [{}] * self.n, [None] * self.n
        elif own is None:
            held = _held_reports(task_lags, self.pid_index, prev,
                                 params.acceptable_recovery_lag) if prev.has_copies else None
            found = self._held_lags(held) if held is not None else None
            self.lag_of, self.good = found or self._lags(task_lags,
                                                         params.acceptable_recovery_lag)

    def _no_history(self, task_locality: Mapping[str, str],
                    own_reports: OwnReports | None) -> None:
        """:meth:`_trace` without a previous model (a first generation): no lineage, no
        sticky processor, no lag from a predecessor; a task's last location is its own
        name's. Partition groups only (a first generation of 100k tasks: a third of the
        world's making)."""
        group_ids: dict[object, int] = {}
        group: list[int] = []
        append = group.append
        last_group: object = None
        g = -1
        for pg in map(attrgetter("partition_group"), self.tasks):
            if pg is not last_group:  # tasks of one group come together
                last_group = pg
                found = group_ids.get(pg)
                if found is None:
                    found = group_ids[pg] = len(group_ids)
                g = found
            append(g)
        n = self.n
        self.group = group
        self.histories = [NO_HISTORY] * len(group_ids)
        self.lineage = TaskLineage(self.tasks, group, self.histories, self.prev, self.factor)
        self.sticky = [-1] * n
        self.locality = [task_locality.get(name) for name in self.names] \
            if task_locality else [None] * n
        if own_reports is not None:
            self.lag_of, self.good = [{}] * n, [None] * n

    def _trace(
        self,
        prev: PreviousAssignment,
        factor: int,
        task_locality: Mapping[str, str],
        own_reports: OwnReports | None,
    ) -> None:
        """Partition group and sticky processor of every task; with ``own_reports`` (every
        report names only tasks its processor ran before), the lags of stateful tasks too,
        read from their predecessors' owners. Lineage names and last locations are read
        on demand (:class:`TaskLineage`, :class:`LastLocations`): the owners of a task's
        key buckets say where it descends from, without its predecessors' names."""
        group_ids: dict[object, int] = {}
        histories = self.histories
        group, sticky = self.group, self.sticky
        lag_of, good = self.lag_of, self.good
        alive = self.pid_index
        prev_factor = prev.factor
        halved = prev_factor == factor << 1
        stateful = self.is_stateful if own_reports is not None else [False] * self.n
        reports_of, caught_up = own_reports or ([], [])
        acceptable = self.params.acceptable_recovery_lag
        empty: Mapping[int, int] = {}
        # shared read-only entries for the usual outcome, one processor caught up at lag 0
        alone = [(j,) for j in range(self.m)]
        at_zero: list[Mapping[int, int]] = [{j: 0} for j in range(self.m)]
        lineage = TaskLineage(self.tasks, group, histories, prev, factor)
        by_name = lineage.by_name
        before, owners, _ = NO_HISTORY
        last_group: object = None
        g = -1
        # One pass over every task (100k and more): the rules of PreviousAssignment.lineage
        # and sticky_owner, inlined; a property test checks that they agree. A group
        # history's tasks and owners have the same key buckets: the owners say which
        # predecessors there are, and a predecessor's name is read only for a lag.
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
            traced = True  # the group history holds u's lineage
            j = -1
            lag: int | None = None  # the lag on j, when j reported all of u's lineage
            if prev_factor <= factor:  # the same tasks, or a split: one predecessor
                parent_bucket = bucket & (prev_factor - 1)
                owner = owners.get(parent_bucket)
                if owner is None:
                    traced = False
                else:
                    j = alive.get(owner, -1)
                    if j >= 0 and stateful[u]:
                        lag = 0 if caught_up[j] else reports_of[j].get(
                            before[parent_bucket].name)
            elif halved:  # two children: most children, ties to the smaller processor
                o1, o2 = owners.get(bucket), owners.get(bucket + factor)
                if o1 is not None and o2 is not None:
                    j1 = alive.get(o1, -1)
                    j2 = alive.get(o2, -1)
                    if j1 == j2:
                        j = j1
                        if j >= 0 and stateful[u] and caught_up[j]:
                            lag = 0
                        elif j >= 0 and stateful[u]:
                            report = reports_of[j]
                            l1 = report.get(before[bucket].name)
                            l2 = report.get(before[bucket + factor].name)
                            if l1 is not None and l2 is not None:
                                lag = l1 if l1 > l2 else l2
                    else:
                        j = j2 if j1 < 0 else j1 if j2 < 0 else min(j1, j2)
                elif o1 is not None or o2 is not None:
                    child_bucket = bucket if o1 is not None else bucket + factor
                    j = alive.get(owners[child_bucket], -1)
                    if j >= 0 and stateful[u]:
                        lag = 0 if caught_up[j] else reports_of[j].get(
                            before[child_bucket].name)
                else:
                    traced = False
            else:  # a deeper merge: the processor holding most children (ties: smallest)
                buckets = [c for c in range(bucket, prev_factor, factor) if c in owners]
                traced = bool(buckets)
                counts: dict[int, int] = {}
                for c in buckets:
                    jc = alive.get(owners[c], -1)
                    if jc >= 0:
                        counts[jc] = counts.get(jc, 0) + 1
                if counts:
                    top = max(counts.values())
                    j = min(jc for jc, c in counts.items() if c == top)
                    if stateful[u] and counts[j] == len(buckets) and caught_up[j]:
                        lag = 0
                    elif stateful[u] and counts[j] == len(buckets):
                        child_lags = [reports_of[j].get(before[c].name) for c in buckets]
                        if None not in child_lags:
                            lag = max(child_lags)  # type: ignore[type-var]
            if not traced:  # a group the previous model did not have: the same name
                owner = prev.owner.get(t.name)
                if owner is not None:
                    by_name[u] = (t.name,)
                    j = alive.get(owner, -1)
                    if j >= 0 and stateful[u]:
                        lag = 0 if caught_up[j] else reports_of[j].get(t.name)
            sticky.append(j)
            if own_reports is None:
                continue
            if lag is None:
                lag_of.append(empty)
                good.append(None)
            else:
                lag_of.append(at_zero[j] if lag <= acceptable else {j: lag})
                good.append(alone[j])
        self.lineage = lineage
        self.locality = (LastLocations(task_locality, self.names, lineage) if task_locality
                         else [None] * self.n)

    def copy_holders(self, u: int) -> tuple[list[str], list[str]]:
        """The processors that held a copy of u's lineage in the previous model: the
        active owners, and the standby (or warm-up) holders; read from u's group history,
        or by task name when its group is new."""
        found = self._holders.get(u)
        if found is not None:  # found by the lag pass already
            return found
        history = self.histories[self.group[u]]
        owners, standbys = history.owners, history.standbys
        owner_pids: list[str] = []
        standby_pids: list[str] = []
        bucket = self.tasks[u].key_bucket
        overlapping = self._overlapping.get(bucket)
        if overlapping is None:  # the same few buckets for every group: computed once each
            overlapping = self._overlapping[bucket] = tuple(
                self.prev.overlapping_buckets(bucket, self.factor))
        for b in overlapping:
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

    def _held_lags(self, held: OwnReports
                   ) -> tuple[list[Mapping[int, int]], list[tuple[int, ...] | None]] | None:
        """:meth:`_lags` when every report names only tasks its processor held a copy of,
        active or standby: a task's reporters are then among its lineage's copy holders,
        found through the group histories (no index of the 400k reported names after the
        factor halved with one standby each), and a caught-up processor's lags are known
        without a look into its report. None when some stateful task has no lineage (its
        own name's reports count: :meth:`_lags` reads them)."""
        reports_of, caught_up = held
        acceptable = self.params.acceptable_recovery_lag
        alive, histories, group = self.pid_index, self.histories, self.group
        overlapping_of, prev, factor = self._overlapping, self.prev, self.factor
        empty: dict[int, int] = {}
        at_zero: list[Mapping[int, int]] = [{j: 0} for j in range(self.m)]
        alone = [(j,) for j in range(self.m)]
        no_standbys: tuple[str, ...] = ()
        lag_of: list[Mapping[int, int]] = []
        good: list[tuple[int, ...] | None] = []
        holders: dict[int, tuple[list[str], list[str]]] = {}
        self._holders = holders
        by_name = self.lineage.by_name
        for u, (t, stateful) in enumerate(zip(self.tasks, self.is_stateful, strict=True)):
            if not stateful:
                lag_of.append(empty)
                good.append(None)
                continue
            tasks, owners, standbys = histories[group[u]]
            bucket = t.key_bucket
            overlapping = overlapping_of.get(bucket)
            if overlapping is None:  # the same few buckets for every group
                overlapping = overlapping_of[bucket] = tuple(
                    prev.overlapping_buckets(bucket, factor))
            lags: dict[int, int] | None = None
            owner_pids: list[str] = []
            standby_pids: list[str] = []
            # _holder_lags, inlined: 100k tasks, 200k children (the by-name path below is
            # rare and calls it)
            for b in overlapping:
                owner = owners.get(b)
                if owner is None:
                    continue
                owner_pids.append(owner)
                here: dict[int, int] = {}
                # the child's name only for a holder not caught up on everything: reading
                # it from 200k previous tasks spread over the heap costs more than the rest
                j = alive.get(owner, -1)
                if j >= 0:
                    if caught_up[j]:
                        here[j] = 0
                    elif (lag := reports_of[j].get(tasks[b].name)) is not None:
                        here[j] = lag if lag > acceptable else 0
                for pid in standbys.get(b, no_standbys):
                    standby_pids.append(pid)
                    j = alive.get(pid, -1)
                    if j < 0:
                        continue
                    if caught_up[j]:
                        here[j] = 0
                    elif (lag := reports_of[j].get(tasks[b].name)) is not None:
                        here[j] = lag if lag > acceptable else 0
                lags = here if lags is None else _merged_pair(lags, here)
            if lags is None:  # lineage by name: a group the previous model did not have
                lin = by_name.get(u)
                if lin is None:  # no lineage at all: its own name's reports count
                    self._holders = {}
                    return None
                for name in lin:
                    lags = _holder_lags(name, prev.owner[name],
                                        prev.standby_holders.get(name, no_standbys), lags,
                                        alive, reports_of, caught_up, acceptable)
                assert lags is not None
            else:  # what copy_holders would find again for the standby placement
                holders[u] = (owner_pids, standby_pids)
            if len(lags) == 1:
                ((j, rank),) = lags.items()
                if rank == 0:  # one caught-up holder: shared entries
                    lag_of.append(at_zero[j])
                    good.append(alone[j])
                    continue
            lag_of.append(lags)
            good.append(_good_among(lags))
        return lag_of, good

    def _lags(self, task_lags: Mapping[str, Mapping[str, int]], acceptable: int
              ) -> tuple[list[Mapping[int, int]], list[tuple[int, ...] | None]]:
        """Per stateful task, processor -> known lag, and the processors good enough to run
        its active: a task's state is its lineage's (a split child's is its parent's; a
        merged task is as far behind as its furthest child, and known only where every
        child was reported); a task without lineage has only its own reports."""
        # Index the reporter of each task in one flat dict built in bulk (in C), reading
        # lags from the processors' own reports; when some task has several reporters
        # (standbys), every reported task gets its processor -> lag dict instead.
        reports_of: list[Mapping[str, int]] = [{} for _ in range(self.m)]
        one_j: dict[str, int] = {}
        many: dict[str, dict[int, int]] | None = None
        reported = 0
        for pid in sorted(task_lags):
            j = self.pid_index.get(pid)
            if j is not None and task_lags[pid]:
                reports_of[j] = task_lags[pid]
                one_j.update(dict.fromkeys(task_lags[pid], j))
                reported += len(task_lags[pid])
        if len(one_j) != reported:  # some task has several reporters: index exactly
            one_j.clear()
            many = {}
            get = many.get
            for j, reports in enumerate(reports_of):
                for name, lag in reports.items():
                    found = get(name)
                    if found is None:
                        many[name] = {j: lag if lag > acceptable else 0}
                    else:
                        found[j] = lag if lag > acceptable else 0
        empty: dict[int, int] = {}

        def of(name: str) -> dict[int, int] | None:
            if many is not None:
                return many.get(name)
            j = one_j.get(name)
            if j is None:
                return None
            lag = reports_of[j][name]
            return {j: lag if lag > acceptable else 0}

        lag_of: list[Mapping[int, int]] = []
        good: list[tuple[int, ...] | None] = []
        for name, stateful, lin in zip(self.names, self.is_stateful, self.lineage.all(),
                                       strict=True):
            if not stateful:
                lag_of.append(empty)
                good.append(None)
                continue
            sources = lin or (name,)
            if len(sources) == 1:
                lags = of(sources[0]) or empty
            elif len(sources) == 2 and many is not None:  # the factor halved, standbys
                lags = _merged_pair(many.get(sources[0]), many.get(sources[1]))
            else:
                lags = _merged_lags([of(child) for child in sources])
            lag_of.append(lags)
            good.append(_good_among(lags))
        return lag_of, good

    def rank(self, u: int, j: int) -> int:
        """0 when caught up, else the lag; UNKNOWN_LAG when j reported none."""
        return self.lag_of[u].get(j, UNKNOWN_LAG)



class OwnReports(NamedTuple):
    """The live processors' lag reports (by processor index), when every report names
    only tasks its processor ran in the previous model; and whether a processor is caught
    up on all of them: it reported every task of its previous container, none beyond
    acceptable_recovery_lag (then a task it ran is known caught up there, without a look
    into its report: 100k look-ups when the factor changes)."""

    reports: list[Mapping[str, int]]
    caught_up: list[bool]


def _own_reports(
    task_lags: Mapping[str, Mapping[str, int]],
    pid_index: Mapping[str, int],
    previous: JobModel | None,
    acceptable: int,
) -> OwnReports | None:
    """The reports when every one names only tasks its processor ran in ``previous`` (no
    standbys, the usual case): then a task's one possible reporter is its previous owner.
    None otherwise."""
    containers = previous.containers if previous is not None else {}

    def ran(pid: str) -> AbstractSet[str] | None:
        container = containers.get(pid)
        return None if container is None else container.tasks.keys()

    return _reports_within(task_lags, pid_index, ran, acceptable)


def _held_reports(
    task_lags: Mapping[str, Mapping[str, int]],
    pid_index: Mapping[str, int],
    prev: PreviousAssignment,
    acceptable: int,
) -> OwnReports | None:
    """The reports when every one names only tasks its processor held a copy of in the
    previous model (active or standby), with who is caught up on all of them; else None."""
    return _reports_within(task_lags, pid_index, prev.held.get, acceptable)


def _reports_within(
    task_lags: Mapping[str, Mapping[str, int]],
    pid_index: Mapping[str, int],
    names_of: Callable[[str], AbstractSet[str] | None],
    acceptable: int,
) -> OwnReports | None:
    """The live processors' reports when each names only tasks in ``names_of`` its
    processor, and whether it reported all of them within ``acceptable``; else None."""
    reports_of: list[Mapping[str, int]] = [{}] * len(pid_index)
    caught_up = [False] * len(pid_index)
    for pid, report in task_lags.items():
        j = pid_index.get(pid)
        if j is None or not report:
            continue
        names = names_of(pid)
        if names is None or not report.keys() <= names:
            return None
        reports_of[j] = report
        # every name reported (the report's are a subset), all within acceptable
        caught_up[j] = len(report) == len(names) and max(report.values()) <= acceptable
    return OwnReports(reports_of, caught_up)


def _holder_lags(name: str, owner: str, standbys: Sequence[str],
                 known: dict[int, int] | None, alive: Mapping[str, int],
                 reports_of: Sequence[Mapping[str, int]], caught_up: Sequence[bool],
                 acceptable: int) -> dict[int, int]:
    """The ranked lags of one previous task on its live copy holders that reported it;
    merged into ``known`` (the lags of its merge siblings) when given: a merged task is
    known only where every child was, as far behind as its furthest child."""
    here: dict[int, int] = {}
    for pid in (owner, *standbys):
        j = alive.get(pid, -1)
        if j < 0:
            continue
        if caught_up[j]:
            here[j] = 0
        elif (lag := reports_of[j].get(name)) is not None:
            here[j] = lag if lag > acceptable else 0
    return here if known is None else _merged_pair(known, here)


def _merged_lags(children: list[dict[int, int] | None]) -> dict[int, int]:
    """A merged task is only as caught up as its least caught-up child, and known only
    on processors that reported every child."""
    if len(children) == 2:
        return _merged_pair(children[0], children[1])
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


def _merged_pair(first: dict[int, int] | None, second: dict[int, int] | None
                 ) -> dict[int, int]:
    """:func:`_merged_lags` of two children (a task of a halved factor), without lists."""
    if first is None or second is None:
        return {}
    merged: dict[int, int] = {}
    for j, lag in first.items():
        more = second.get(j)
        if more is not None:
            merged[j] = more if more > lag else lag
    return merged


def _good_among(ranks: Mapping[int, int]) -> tuple[int, ...] | None:
    """The processors whose lag ranks best (caught up, or the least behind); None when no
    lag is known (every processor is as good as any other)."""
    if not ranks:
        return None
    if len(ranks) == 1:
        return tuple(ranks)
    if len(ranks) == 2:  # an active and its standby: the usual case with standbys
        (j1, r1), (j2, r2) = ranks.items()
        if r1 != r2:
            return (j1,) if r1 < r2 else (j2,)
        return (j1, j2) if j1 < j2 else (j2, j1)
    best = min(ranks.values())
    return tuple(sorted(j for j, rank in ranks.items() if rank == best))
