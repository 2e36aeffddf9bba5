"""Incremental job-model generation: the leader's generator, which keeps the indexes of
its last job models and updates them by the change instead of rebuilding them.

:class:`JobModelGenerator` answers exactly as :func:`grouping.generation.generate_job_model`
does (a property test checks it over random sequences of changes). When the change keeps
the tasks (same inputs, grouper and elasticity factor) and the previous model is one it
generated, it works on the processors the change touches only: processors that left,
joined or must give tasks up, and the tasks to place again (the idea of Kafka's
KAFKA-16864: an assignment that reuses the previous one's data structures, and
copy-on-write containers, so that the unchanged ones are the previous model's objects).
Anything else (a factor change, new inputs, standby copies, lag reports that name tasks a
processor did not run, a restarted leader) takes the full computation.

The incremental path follows the full one's decisions step by step (window targets over
the same keep counts, the same give-up order, the same placement preferences and ties),
for the cases it accepts:

- every task keeps its name, so a task's sticky owner is its previous owner if still
  live, and its locality is looked up by its name;
- no standby copies (``num_standbys`` 0, no warm-up left in the previous model);
- for stateful tasks, every lag report names only tasks its processor ran: then a task's
  only caught-up processor is its previous owner (when that one reported it), freeing a
  slot on a caught-up processor by moving another task there never succeeds, and a task
  given up by its owner is placed like any other and warms up at its target.
"""

from __future__ import annotations

import heapq
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from grouping.assignment import (
    AssignmentParams,
    AssignmentResult,
    AssignmentTrace,
    window_targets,
)
from grouping.assignment.slots import LoadQueue, Slots
from grouping.generation import GeneratedJobModel, gc_paused, generate_traced, job_config
from grouping.groupers import AllSspToSingleTask, SspGrouper
from grouping.key_bucket import DEFAULT_MAX_ELASTICITY_FACTOR
from grouping.lineage import PreviousAssignment
from grouping.model import ContainerModel, JobModel, SystemStreamPartition, TaskMode, TaskModel
from grouping.task_names import standby_task_name


@dataclass(frozen=True, slots=True)
class _Index:
    """One generated job model, indexed for the next change. Task u is the u-th task by
    name; the lists of tasks, groups and statefulness are shared by every index of the
    same tasks, ``owner`` and the per-processor lists are copied on write."""

    inputs: list[SystemStreamPartition]
    settings: tuple[object, ...]
    tasks: Sequence[TaskModel]
    names: Sequence[str]
    group: Sequence[int]
    members: Sequence[Sequence[int]]  # group id -> its tasks
    is_stateful: Sequence[bool]
    n_stateful: int
    owner: list[str]  # processor id of each task's active copy
    on_proc: dict[str, list[int]]  # processor id -> its active tasks (ascending)
    stateful_on: dict[str, int]  # processor id -> how many of them are stateful
    location: dict[str, str]
    clean: bool  # no standby copy in the model


class JobModelGenerator:
    """Generates job models as :func:`generate_job_model` does, incrementally when it can.

    Keeps the indexes of the last ``keep`` models it generated (the leader passes the
    latest one as ``previous``); ``last_path`` says how the last model was made
    (``"incremental"`` or ``"full"``).
    """

    def __init__(self, keep: int = 2, max_change_share: float = 0.25) -> None:
        self._keep = keep
        self._max_change_share = max_change_share
        self._indexes: OrderedDict[int, tuple[JobModel, _Index | _Unindexed]] = OrderedDict()
        # processor id -> (its lag report, a container) known to name only that
        # container's tasks: reports and containers are immutable, and steady ones keep
        # their identity (unchanged containers are shared between versions, an unchanged
        # report is kept by the membership), so a change re-checks only what changed
        self._own_reports: dict[str, tuple[Mapping[str, int], ContainerModel]] = {}
        self._retired: list[tuple[int, tuple[JobModel, _Index | _Unindexed]]] = []
        # the last full generation's intermediates (100k tasks: 15-20 ms of freeing),
        # freed by index_lineage or when the next generation replaces them
        self._leftovers: list[object] = []
        self.last_path = ""

    def generate(
        self,
        version: int,
        inputs: Iterable[SystemStreamPartition],
        grouper: SspGrouper,
        elasticity_factor: int,
        processors: Mapping[str, str],
        *,
        previous: JobModel | None = None,
        task_locality: Mapping[str, str] | None = None,
        task_lags: Mapping[str, Mapping[str, int]] | None = None,
        stateful: bool | AbstractSet[str] = False,
        params: AssignmentParams | None = None,
        max_elasticity_factor: int = DEFAULT_MAX_ELASTICITY_FACTOR,
        extra_config: Mapping[str, Any] | None = None,
    ) -> GeneratedJobModel:
        """The next job model; the arguments are :func:`generate_job_model`'s."""
        inputs = inputs if isinstance(inputs, list) else list(inputs)
        params = params or AssignmentParams()
        settings = (grouper.name, elasticity_factor, params, max_elasticity_factor,
                    stateful if isinstance(stateful, bool) else frozenset(stateful))
        with gc_paused():
            index = self._index_of(previous, inputs, settings, grouper)
            if index is not None:
                assert previous is not None
                step = _Step(index, previous, processors, task_locality or {},
                             task_lags or {}, params, self._max_change_share,
                             self._own_reports)
                done = step.run()
                if done is not None:
                    result, new_index = done
                    model = JobModel.of(
                        version, job_config(grouper, elasticity_factor, extra_config),
                        result.containers.values())
                    self._remember(model, new_index)
                    self.last_path = "incremental"
                    return GeneratedJobModel(model, result)
            leftovers: list[object] = []
            generated, trace = generate_traced(
                version, inputs, grouper, elasticity_factor, processors, previous,
                task_locality, task_lags, stateful, params, max_elasticity_factor,
                extra_config, leftovers)
            self._leftovers = leftovers
            if trace is not None and not isinstance(grouper, AllSspToSingleTask):
                # indexed on first need: by index_lineage once the model is published, or
                # at the next change (17 ms for 100k tasks, not on the way to publication)
                self._remember(generated.job_model, _Unindexed(trace, inputs, settings))
            self.last_path = "full"
            return generated

    def index_lineage(self, model: JobModel) -> None:
        """Index ``model``'s lineage (its tasks and copy holders by partition group) for
        the generation that will follow it. A full generation (a factor change, standby
        copies) reads it from its previous model; the leader builds it once the model's
        barrier is done and it has been idle a while, instead of at the trigger of the next
        change (100k tasks: 60 ms; 200k, with one standby each: 160 ms). A model made by
        the full computation gets its index for an incremental next step here too, and what
        the last generation let go (indexes, intermediates) is freed."""
        self._retired = []
        self._leftovers = []
        found = self._indexes.get(id(model))
        if found is not None and found[0] is model and isinstance(found[1], _Unindexed):
            self._indexes[id(model)] = (model, found[1].index(model))
        index = PreviousAssignment.of(model)
        if index.has_copies:
            index.held  # noqa: B018 -- built now: who held which copies, read by the lag pass

    def _index_of(self, previous: JobModel | None, inputs: list[SystemStreamPartition],
                  settings: tuple[object, ...], grouper: SspGrouper) -> _Index | None:
        if previous is None or isinstance(grouper, AllSspToSingleTask):
            return None
        found = self._indexes.get(id(previous))
        if found is None or found[0] is not previous:
            return None
        index = found[1]
        if isinstance(index, _Unindexed):
            index = index.index(previous)
            self._indexes[id(previous)] = (previous, index)
        if not index.clean or index.settings != settings:
            return None
        if index.inputs is not inputs and index.inputs != inputs:
            return None
        self._indexes.move_to_end(id(previous))
        return index

    def _remember(self, model: JobModel, index: _Index | _Unindexed) -> None:
        self._indexes[id(model)] = (model, index)
        retired = []
        while len(self._indexes) > self._keep:
            retired.append(self._indexes.popitem(last=False))
        if retired:
            # freed by index_lineage, off the way to publication: freeing an old
            # index (and its model when nothing else holds it: 100k tasks, 15-25 ms) is
            # not part of making the new one
            self._retired = retired


@dataclass(frozen=True, slots=True)
class _Unindexed:
    """A model made by the full computation, with what indexing it takes."""

    trace: AssignmentTrace
    inputs: list[SystemStreamPartition]
    settings: tuple[object, ...]

    def index(self, model: JobModel) -> _Index:
        return _index_from(self.trace, model, self.inputs, self.settings)


def _index_from(trace: AssignmentTrace, model: JobModel,
                inputs: list[SystemStreamPartition], settings: tuple[object, ...]) -> _Index:
    """Index a model made by the full computation (one pass over its tasks)."""
    tasks, pids = trace.tasks, trace.pids
    owner = [pids[j] for j in trace.active]
    on_proc: dict[str, list[int]] = {pid: [] for pid in pids}
    members: list[list[int]] = []
    for u, (pid, g) in enumerate(zip(owner, trace.group, strict=True)):
        on_proc[pid].append(u)
        if g == len(members):
            members.append([])
        members[g].append(u)
    is_stateful = list(trace.is_stateful)
    n_stateful = sum(is_stateful)
    if n_stateful == len(is_stateful):
        stateful_on = {pid: len(us) for pid, us in on_proc.items()}
    elif n_stateful == 0:
        stateful_on = dict.fromkeys(on_proc, 0)
    else:
        stateful_on = {pid: sum(is_stateful[u] for u in us) for pid, us in on_proc.items()}
    containers = model.containers
    clean = all(len(c.tasks) == len(on_proc[pid]) for pid, c in containers.items())
    return _Index(inputs, settings, tasks, [t.name for t in tasks], trace.group, members,
                  is_stateful, n_stateful, owner, on_proc, stateful_on,
                  {pid: containers[pid].location_id for pid in pids}, clean)


class _Step:
    """One incremental generation from ``index`` to the live ``processors``."""

    def __init__(self, index: _Index, previous: JobModel, processors: Mapping[str, str],
                 task_locality: Mapping[str, str], task_lags: Mapping[str, Mapping[str, int]],
                 params: AssignmentParams, max_change_share: float,
                 own_reports: dict[str, tuple[Mapping[str, int], ContainerModel]]) -> None:
        self.x = index
        self.own_reports = own_reports
        self.previous = previous
        self.processors = processors
        self.task_locality = task_locality
        self.task_lags = task_lags
        self.params = params
        self.max_change_share = max_change_share

    def run(self) -> tuple[AssignmentResult, _Index] | None:
        x, processors = self.x, self.processors
        if self.params.num_standbys > 0 or not processors:
            return None
        before = x.on_proc
        removed = [pid for pid in before if pid not in processors]
        added = [pid for pid in processors if pid not in before]
        if len(removed) + len(added) > max(1, self.max_change_share * len(before)):
            return None  # a change this large is as fast to compute in full
        location = x.location
        if any(location[pid] != loc for pid, loc in processors.items() if pid in location):
            return None  # a processor moved: localities change
        if x.n_stateful and not self._own_reports():
            return None
        self.pids = pids = sorted(processors)
        self.m = len(pids)
        self.pid_index = {pid: j for j, pid in enumerate(pids)}
        self.gone = frozenset(removed)
        # task -> its new processor index, for the tasks placed again (orphans)
        self.placed: dict[int, int] = {}
        # processor index -> tasks it gave up
        self.given_up: dict[int, list[int]] = {}
        n = len(x.tasks)
        moving: list[int] = []
        active_load = [0] * self.m
        if x.n_stateful:
            place = self._place_class(True, x.n_stateful, [0] * self.m)
            for j, kept in enumerate(self._class_counts(True)):
                active_load[j] = kept - len(self.given_up.get(j, ()))
            for u, j in place.items():
                owner = self.pid_index.get(x.owner[u], -1)
                if owner >= 0 and j != owner and self._reported(u, owner) is not None:
                    moving.append(u)  # its target is not caught up: the active stays
                    active_load[owner] += 1
                else:
                    active_load[j] += 1
        if x.n_stateful < n:
            self._place_class(False, n - x.n_stateful, active_load)
        # the active of a task that moves stays with its (caught-up) owner for now
        moving.sort()
        warmups = moving[:self.params.max_warmup_replicas]
        movements = {x.names[u]: pids[self.placed[u]] for u in moving}
        active_at = dict(self.placed)
        for u in moving:
            active_at[u] = self.pid_index[x.owner[u]]
        return self._result(active_at, warmups, movements, bool(moving))

    # -- lags

    def _own_reports(self) -> bool:
        """True when every live processor's report names only tasks it ran."""
        containers = self.previous.containers
        known = self.own_reports
        for pid, report in self.task_lags.items():
            if not report or pid not in self.processors:
                continue
            container = containers.get(pid)
            if container is None:
                return False
            seen = known.get(pid)
            if seen is not None and seen[0] is report and seen[1] is container:
                continue
            if not report.keys() <= container.tasks.keys():
                return False
            known[pid] = (report, container)
        if len(known) > 2 * len(self.processors):  # processors gone: forget them
            for pid in [p for p in known if p not in self.processors]:
                del known[pid]
        return True

    def _reported(self, u: int, j: int) -> int | None:
        """The lag processor j reported for task u, if any."""
        report = self.task_lags.get(self.pids[j])
        return None if report is None else report.get(self.x.names[u])

    # -- placement of one class of tasks (stateful actives, or stateless ones)

    def _class_counts(self, stateful: bool) -> list[int]:
        """Per live processor, how many tasks of the class it ran (0 for new ones)."""
        x = self.x
        counts = []
        for pid in self.pids:
            us = x.on_proc.get(pid)
            if us is None:
                counts.append(0)
            elif stateful:
                counts.append(x.stateful_on[pid])
            else:
                counts.append(len(us) - x.stateful_on[pid])
        return counts

    def _units_on(self, pid: str, stateful: bool) -> list[int]:
        x = self.x
        us = x.on_proc[pid]
        if x.n_stateful == 0 or x.n_stateful == len(x.tasks):
            return us
        flags = x.is_stateful
        return [u for u in us if flags[u] is stateful]

    def _place_class(self, stateful: bool, total: int, base: list[int]) -> dict[int, int]:
        """As assignment's Placer.run for the class; returns task -> processor index for
        the tasks placed again (the others stay with their owner)."""
        x, m = self.x, self.m
        keep = self._class_counts(stateful)
        targets = window_targets(keep, base, total, self.params.balance_factor)
        floor, cap, pool = targets.floor, targets.cap, targets.pool
        slots = Slots(targets, base)
        orphans: list[int] = []
        room = [keep[j] < floor[j] or (pool > 0 and keep[j] < cap[j]) for j in range(m)]
        room_count = sum(room)
        for j, pid in enumerate(self.pids):
            if keep[j] > floor[j]:
                given = self._give_up(j, self._units_on(pid, stateful), floor[j], stateful,
                                      room_count - (1 if room[j] else 0) > 0)
                self.given_up.setdefault(j, []).extend(given)
                orphans.extend(given)
                slots.take_many(j, floor[j])
            elif keep[j]:
                slots.take_many(j, keep[j])
        for pid in self.gone:
            orphans.extend(self._units_on(pid, stateful))
        orphans.sort()
        load = slots.load
        all_queue = LoadQueue(range(m), load)
        # per location, built on first use from the loads of the moment: the same queue
        # as one built now and kept up to date (entries of stale loads are skipped)
        loc_queue: dict[str, LoadQueue] = {}
        by_loc: dict[str, list[int]] | None = None

        def queue_at(loc: str) -> LoadQueue | None:
            nonlocal by_loc
            if by_loc is None:
                by_loc = {}
                for j, pid in enumerate(self.pids):
                    by_loc.setdefault(self.processors[pid], []).append(j)
            if loc not in by_loc:
                return None
            if loc not in loc_queue:
                loc_queue[loc] = LoadQueue(by_loc[loc], load)
            return loc_queue[loc]
        group_procs = self._group_procs(orphans, stateful)
        placed: dict[int, int] = {}

        def assign(u: int, j: int) -> None:
            slots.take(j)
            placed[u] = j
            procs = group_procs.setdefault(x.group[u], {})
            procs[j] = procs.get(j, 0) + 1
            all_queue.touch(j)
            queue = loc_queue.get(self.processors[self.pids[j]])
            if queue is not None:
                queue.touch(j)

        def choose(u: int) -> int:
            loc = self.task_locality.get(x.names[u]) if self.task_locality else None
            queue = None if loc is None else queue_at(loc)
            if queue is not None:
                q = queue.best(slots.open, None)
                if q >= 0:
                    return q
            gp = group_procs.get(x.group[u])
            if gp:
                cands = [q for q in gp if slots.open(q)]
                if cands:
                    return min(cands, key=lambda q: (load[q], q))
            q = all_queue.best(slots.open, None)
            if q < 0:  # cannot happen: the targets hold a slot for every task
                raise AssertionError("no open processor for a task")
            return q

        if stateful:
            # caught-up placements first: a task given up by its owner may only go back
            # there (its only caught-up processor); tasks without a caught-up processor
            # (their owner left) are placed as they come, the rest wait
            owners = {u: self.pid_index.get(x.owner[u], -1) for u in orphans}
            good = {u: j for u, j in owners.items()
                    if j >= 0 and self._reported(u, j) is not None}
            deferred = []
            for u in sorted(orphans, key=lambda u: (1 if u in good else m, u)):
                j = good.get(u, -1)
                if j < 0:
                    assign(u, choose(u))
                elif slots.open(j):
                    assign(u, j)
                else:
                    deferred.append(u)
            for u in deferred:
                assign(u, choose(u))  # its caught-up processor is full: slots never reopen
        else:
            for u in orphans:
                assign(u, choose(u))
        self.placed.update(placed)
        return placed

    def _give_up(self, j: int, units: list[int], limit: int, stateful: bool,
                 free_alternative: bool) -> list[int]:
        """The tasks an overfull processor gives up: the last in assignment's give-up
        order (those another processor could take, then those of the partition groups it
        holds least of, then later tasks)."""
        unit_groups = list(map(self.x.group.__getitem__, units))
        held = Counter(unit_groups)
        count = len(units) - limit
        if stateful and free_alternative:
            # a task caught up on j alone (j reported it) has nowhere else to go
            report = self.task_lags.get(self.pids[j]) or {}
            elsewhere = [name not in report for name in map(self.x.names.__getitem__, units)]
            if any(elsewhere):
                keys = list(zip(elsewhere, [-held[g] for g in unit_groups], units,
                                strict=True))
                return sorted(key[-1] for key in heapq.nlargest(count, keys))
        if count == 1:
            # the usual case: the last task of the groups the processor holds least of
            # (units ascend: the first such from the end, found without a full pass)
            least = min(held.values())
            for i in range(len(units) - 1, -1, -1):
                if held[unit_groups[i]] == least:
                    return [units[i]]
        pairs = list(zip([-held[g] for g in unit_groups], units, strict=True))
        return sorted(pair[-1] for pair in heapq.nlargest(count, pairs))

    def _group_procs(self, orphans: list[int], stateful: bool) -> dict[int, dict[int, int]]:
        """Per partition group of an orphan, the processors holding its kept tasks of the
        class, with counts."""
        x = self.x
        leaving = set(orphans)
        flags = x.is_stateful
        out: dict[int, dict[int, int]] = {}
        for g in sorted({x.group[u] for u in orphans}):
            procs: dict[int, int] = {}
            for u in x.members[g]:
                if u in leaving or flags[u] is not stateful:
                    continue
                j = self.pid_index.get(x.owner[u], -1)
                if j >= 0:
                    procs[j] = procs.get(j, 0) + 1
            out[g] = procs
        return out

    # -- the new model

    def _result(self, active_at: dict[int, int], warmups: list[int],
                movements: dict[str, str], probing: bool) -> tuple[AssignmentResult, _Index]:
        x, pids = self.x, self.pids
        owner = list(x.owner)
        on_proc = {pid: us for pid, us in x.on_proc.items() if pid not in self.gone}
        stateful_on = {pid: c for pid, c in x.stateful_on.items() if pid not in self.gone}
        changed: set[str] = set()
        leaving: dict[str, set[int]] = {}
        for u, j in active_at.items():
            old, new = owner[u], pids[j]
            if old == new:
                continue
            leaving.setdefault(old, set()).add(u)
            owner[u] = new
            changed.add(new)
        arriving: dict[str, list[int]] = {}
        for u in active_at:
            arriving.setdefault(owner[u], []).append(u)
        flags = x.is_stateful
        for pid in self.processors:
            if pid not in on_proc:
                on_proc[pid] = []
                stateful_on[pid] = 0
                changed.add(pid)
        for pid, gone in leaving.items():
            if pid in on_proc:
                if len(gone) == 1:  # the usual give-up: one task, removed at C speed
                    kept = list(on_proc[pid])
                    kept.remove(next(iter(gone)))
                else:
                    kept = [u for u in on_proc[pid] if u not in gone]
                on_proc[pid] = kept
                stateful_on[pid] -= sum(flags[u] for u in gone)
                changed.add(pid)
        for pid in changed:
            us = [u for u in arriving.get(pid, ()) if u not in on_proc[pid]]
            if us:
                on_proc[pid] = sorted(on_proc[pid] + us)
                stateful_on[pid] += sum(flags[u] for u in us)
        warm_on: dict[str, list[int]] = {}
        for u in warmups:
            warm_on.setdefault(pids[self.placed[u]], []).append(u)
        changed.update(warm_on)
        tasks = x.tasks
        containers: dict[str, ContainerModel] = {}
        names = x.names
        previous = self.previous.containers
        for pid in pids:
            if pid in changed:
                us = on_proc[pid]
                warm = warm_on.get(pid)
                if not warm and pid not in arriving and pid in leaving:
                    # it only gave tasks up: the previous container (no standby copy in
                    # it, the index is clean) less those, in the same order
                    containers[pid] = previous[pid].without(
                        map(names.__getitem__, leaving[pid]))
                    continue
                copies = list(map(tasks.__getitem__, us))
                if warm:
                    copies += [tasks[u].with_mode(TaskMode.STANDBY,
                                                  standby_task_name(names[u], 0))
                               for u in warm]
                    containers[pid] = ContainerModel.of(pid, self.processors[pid], copies)
                else:  # tasks in name order: task u is the u-th by name
                    containers[pid] = ContainerModel.of_sorted(
                        pid, self.processors[pid], map(names.__getitem__, us), copies)
            else:
                containers[pid] = previous[pid]  # unchanged: shared
        result = AssignmentResult(
            MappingProxyType(containers), probing,
            frozenset((x.names[u], pids[self.placed[u]]) for u in warmups),
            MappingProxyType(movements))
        index = _Index(x.inputs, x.settings, x.tasks, x.names, x.group, x.members,
                       x.is_stateful, x.n_stateful, owner, on_proc, stateful_on,
                       {pid: self.processors[pid] for pid in pids}, not warmups)
        return result, index
