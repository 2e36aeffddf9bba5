"""What the previous job model says about a task, across elasticity changes.

A task of the new model descends from the previous model's tasks whose key space overlaps
its own within the same partition group: the task itself (nothing changed), its parent
after a split (F doubled), or its children after a merge (F halved); a task of a group the
previous model did not have (say, a stream was added to the job) descends from the previous
task of the same name, if any; so does a task of a group its tasks do not split by key
bucket (AllSspToSingleTask gives every task every SSP). Stickiness, locality and lag all
follow this lineage, so a split child prefers its parent's processor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import attrgetter
from typing import NamedTuple

from grouping.model import ContainerModel, JobModel, TaskMode, TaskModel
from grouping.task_names import elasticity_factor_of, parse_standby_task_name

PartitionGroup = tuple[object, ...]


class GroupHistory(NamedTuple):
    """One partition group in the previous model, by key bucket (a whole-partition task
    under bucket 0): the active tasks, the processors that ran them, and the processors
    that held standby (or warm-up) copies."""

    tasks: dict[int, TaskModel]
    owners: dict[int, str]
    standbys: dict[int, list[str]]


NO_HISTORY = GroupHistory({}, {}, {})
_MEMO_KEY = "previous-assignment"


class PreviousAssignment:
    """The parts of a previous job model that grouping and assignment need, indexed once
    (one pass over the model, memoised on it).

    Lineage is found through partition groups: ``history_of(group)`` holds each key
    bucket's previous task and the processors holding copies of it, so the tasks of one
    partition are traced with small dictionaries instead of lookups among every task name.
    The by-name views (``owner``, ``tasks``, ``standby_holders``) are built on first use,
    which a rebalance that keeps its partition groups never needs.
    """

    __slots__ = ("_containers", "_held", "_owner", "_standby_holders", "_tasks", "by_group",
                 "changelog_by_group", "factor", "has_copies")

    def __init__(
        self,
        factor: int = 1,
        by_group: Mapping[PartitionGroup, GroupHistory] | None = None,
        changelog_by_group: Mapping[PartitionGroup, int] | None = None,
        containers: Mapping[str, ContainerModel] | None = None,
        has_copies: bool = False,
    ) -> None:
        self.factor = factor
        #: whether the model holds standby (or warm-up) copies
        self.has_copies = has_copies
        #: partition group -> its previous tasks and the processors holding copies of them
        self.by_group: Mapping[PartitionGroup, GroupHistory] = by_group or {}
        #: partition group -> the (smallest) changelog partition its tasks used
        self.changelog_by_group: Mapping[PartitionGroup, int] = changelog_by_group or {}
        self._containers: Mapping[str, ContainerModel] = containers or {}
        self._owner: dict[str, str] | None = None
        self._tasks: dict[str, TaskModel] | None = None
        self._standby_holders: dict[str, tuple[str, ...]] | None = None
        self._held: dict[str, frozenset[str]] | None = None

    @staticmethod
    def of(previous: JobModel | None) -> PreviousAssignment:
        """Index ``previous`` (None: no history)."""
        if previous is None:
            return PreviousAssignment()
        return previous.memo(_MEMO_KEY, _index)

    @staticmethod
    def indexed(model: JobModel) -> bool:
        """Whether ``model`` has been indexed (:meth:`of` answers at once)."""
        return model.memoized(_MEMO_KEY)

    @property
    def owner(self) -> Mapping[str, str]:
        """Active task name -> processor id (built on first use)."""
        if self._owner is None:
            active = TaskMode.ACTIVE
            self._owner = {name: pid for pid, container in self._containers.items()
                           for name, task in container.tasks.items() if task.mode is active}
        return self._owner

    @property
    def standby_holders(self) -> Mapping[str, tuple[str, ...]]:
        """Active task name -> processors holding a standby copy (built on first use)."""
        if self._standby_holders is None:
            holders: dict[str, set[str]] = {}
            active = TaskMode.ACTIVE
            for pid, container in self._containers.items():
                for name, task in container.tasks.items():
                    parsed = None if task.mode is active else parse_standby_task_name(name)
                    if parsed is not None:
                        holders.setdefault(parsed[0], set()).add(pid)
            self._standby_holders = {name: tuple(sorted(pids))
                                     for name, pids in holders.items()}
        return self._standby_holders

    @property
    def held(self) -> Mapping[str, frozenset[str]]:
        """Processor id -> the active task names it held a copy of, active or standby
        (built on first use; JobModelGenerator.index_lineage builds it ahead for a model
        with copies)."""
        if self._held is None:
            name_of, by_group = attrgetter("name"), self.by_group
            held: dict[str, frozenset[str]] = {}
            for pid, container in self._containers.items():
                names = list(map(name_of, container.active_tasks))
                for copy in container.standby_tasks:
                    # a copy's active is its group's task of the same key bucket (where
                    # the group histories, which lineage follows, count it as a holder)
                    bucket = copy.key_bucket if copy.key_bucket > 0 else 0
                    twin = by_group.get(copy.partition_group, NO_HISTORY).tasks.get(bucket)
                    if twin is not None:
                        names.append(twin.name)
                    else:  # a group without history (shared SSPs): by its name
                        parsed = parse_standby_task_name(copy.name)
                        if parsed is not None:
                            names.append(parsed[0])
                held[pid] = frozenset(names)
            self._held = held
        return self._held

    @property
    def tasks(self) -> Mapping[str, TaskModel]:
        """Active task name -> task model (built on first use)."""
        if self._tasks is None:
            active = TaskMode.ACTIVE
            self._tasks = {name: task for container in self._containers.values()
                           for name, task in container.tasks.items() if task.mode is active}
        return self._tasks

    def history_of(self, group: PartitionGroup) -> GroupHistory:
        """The previous tasks of one partition group and the processors holding copies."""
        return self.by_group.get(group, NO_HISTORY)

    def overlapping_buckets(self, bucket: int, factor: int) -> range:
        """The previous model's key buckets overlapping ``bucket`` under ``factor``: the
        parent's after a split (or the bucket itself), the children's after a merge."""
        bucket = max(bucket, 0)
        prev_factor = self.factor
        if prev_factor <= factor:
            parent = bucket & (prev_factor - 1)
            return range(parent, parent + 1)
        return range(bucket, prev_factor, factor)

    def lineage_in(self, history: GroupHistory, bucket: int, factor: int) -> tuple[str, ...]:
        """Previous tasks (of one group's ``history``) overlapping ``bucket`` under ``factor``."""
        tasks = history.tasks
        return tuple(tasks[b].name for b in self.overlapping_buckets(bucket, factor)
                     if b in tasks)

    def lineage(self, task: TaskModel, factor: int) -> tuple[str, ...]:
        """Names of the previous active tasks ``task`` descends from.

        Those of its partition group whose key space overlaps its own (itself when nothing
        changed, its parent after a split, its children after a merge); when its group has
        none (a new group, e.g. a stream was added to the job), the previous task of the
        same name, if there was one.
        """
        found = self.lineage_in(self.history_of(task.partition_group), task.key_bucket, factor)
        if found:
            return found
        return (task.name,) if task.name in self.owner else ()

    def sticky_owner(self, lineage: Iterable[str], alive: Mapping[str, object]) -> str | None:
        """The live processor that held most of ``lineage`` (ties: smallest processor id)."""
        owner = self.owner
        counts: dict[str, int] = {}
        for name in lineage:
            pid = owner.get(name)
            if pid is not None and pid in alive:
                counts[pid] = counts.get(pid, 0) + 1
        if len(counts) <= 1:
            return next(iter(counts), None)
        top = max(counts.values())
        return min(pid for pid, c in counts.items() if c == top)


def _index(previous: JobModel) -> PreviousAssignment:
    by_group: dict[PartitionGroup, GroupHistory] = {}
    changelog: dict[PartitionGroup, int] = {}
    active = TaskMode.ACTIVE
    tasks: dict[int, TaskModel] = {}
    owners: dict[int, str] = {}
    standbys: dict[int, list[str]] = {}
    actives = copies = 0
    for pid, container in previous.containers.items():
        last_group: object = None
        for task in container.tasks.values():
            group = task.partition_group
            if group is not last_group:  # a container's tasks of one group are adjacent
                last_group = group
                found = by_group.get(group)
                if found is None:
                    found = by_group[group] = GroupHistory({}, {}, {})
                    if task.changelog_partition >= 0:
                        changelog[group] = task.changelog_partition
                tasks, owners, standbys = found
            bucket = task.key_bucket if task.key_bucket > 0 else 0
            if task.mode is active:
                tasks[bucket] = task
                owners[bucket] = pid
                actives += 1
            else:  # a standby or warm-up copy: same SSPs, so same group and bucket
                standbys.setdefault(bucket, []).append(pid)
                copies += 1
    if actives != sum(len(history.tasks) for history in by_group.values()):
        _drop_shared_groups(previous, by_group)
    factor = previous.config.get("elasticityFactor")
    if factor is None:
        factor = elasticity_factor_of(
            t for c in previous.containers.values() for t in c.active_tasks)
    return PreviousAssignment(int(factor), by_group, changelog, previous.containers,
                              copies > 0)


def _drop_shared_groups(previous: JobModel,
                        by_group: dict[PartitionGroup, GroupHistory]) -> None:
    """Forget the history of partition groups whose tasks do not split them by key bucket
    (several active tasks read the same SSPs, as AllSspToSingleTask makes): key space
    says nothing there, so their tasks follow lineage by name."""
    seen: dict[PartitionGroup, int] = {}
    for container in previous.containers.values():
        for task in container.active_tasks:
            seen[task.partition_group] = seen.get(task.partition_group, 0) + 1
    for group, count in seen.items():
        if count != len(by_group[group].tasks):
            by_group[group] = NO_HISTORY
