"""What the previous job model says about a task, across elasticity changes.

A task of the new model descends from the previous model's tasks whose key space overlaps
its own within the same partition group: the task itself (same name), its parent after a
split (F doubled), or its children after a merge (F halved). Stickiness, locality and lag
all follow this lineage, so a split child prefers its parent's processor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from grouping.model import JobModel, TaskMode, TaskModel
from grouping.task_names import elasticity_factor_of, parse_standby_task_name

PartitionGroup = tuple[object, ...]


class PreviousAssignment:
    """The parts of a previous job model that grouping and assignment need, indexed once
    (one pass over the model, memoised on it)."""

    __slots__ = ("by_group", "changelog_by_group", "factor", "owner", "standby_holders",
                 "tasks")

    def __init__(
        self,
        factor: int = 1,
        owner: Mapping[str, str] | None = None,
        standby_holders: Mapping[str, tuple[str, ...]] | None = None,
        tasks: Mapping[str, TaskModel] | None = None,
        by_group: Mapping[PartitionGroup, Mapping[int, str]] | None = None,
        changelog_by_group: Mapping[PartitionGroup, int] | None = None,
    ) -> None:
        self.factor = factor
        #: active task name -> processor id
        self.owner: Mapping[str, str] = owner or {}
        #: active task name -> processors holding a standby copy
        self.standby_holders: Mapping[str, tuple[str, ...]] = standby_holders or {}
        #: active task name -> task model
        self.tasks: Mapping[str, TaskModel] = tasks or {}
        #: partition group -> key bucket -> active task name
        self.by_group: Mapping[PartitionGroup, Mapping[int, str]] = by_group or {}
        #: partition group -> the (smallest) changelog partition its tasks used
        self.changelog_by_group: Mapping[PartitionGroup, int] = changelog_by_group or {}

    @staticmethod
    def of(previous: JobModel | None) -> PreviousAssignment:
        """Index ``previous`` (None: no history)."""
        if previous is None:
            return PreviousAssignment()
        return previous.memo("previous-assignment", _index)

    def buckets_of(self, group: PartitionGroup) -> Mapping[int, str]:
        """Previous active tasks of one partition group: key bucket -> task name."""
        return self.by_group.get(group, {})

    def lineage_in(self, buckets: Mapping[int, str], bucket: int, factor: int) -> tuple[str, ...]:
        """Previous tasks (of one group's ``buckets``) overlapping ``bucket`` under ``factor``."""
        if not buckets:
            return ()
        bucket = max(bucket, 0)
        prev_factor = self.factor
        if prev_factor <= factor:
            parent = buckets.get(bucket & (prev_factor - 1))
            return () if parent is None else (parent,)
        children = []
        for b in range(bucket, prev_factor, factor):
            child = buckets.get(b)
            if child is not None:
                children.append(child)
        return tuple(children)

    def lineage(self, task: TaskModel, factor: int) -> tuple[str, ...]:
        """Names of the previous active tasks whose key space overlaps ``task``'s."""
        if task.name in self.owner:
            return (task.name,)
        return self.lineage_in(self.buckets_of(task.partition_group), task.key_bucket, factor)

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
    owner: dict[str, str] = {}
    tasks: dict[str, TaskModel] = {}
    holders: dict[str, list[str]] = {}
    by_group: dict[PartitionGroup, dict[int, str]] = {}
    changelog: dict[PartitionGroup, int] = {}
    active = TaskMode.ACTIVE
    buckets: dict[int, str] = {}
    for pid, container in previous.containers.items():
        container_tasks = container.tasks
        # every task as active in bulk (C loops); standby copies are taken out below
        owner.update(dict.fromkeys(container_tasks, pid))
        tasks.update(container_tasks)
        last_group: object = None
        for name, task in container_tasks.items():
            if task.mode is not active:
                del owner[name], tasks[name]
                parsed = parse_standby_task_name(name)
                if parsed is not None:
                    holders.setdefault(parsed[0], []).append(pid)
                continue
            group = task.partition_group
            if group is not last_group:  # a container's tasks of one group are adjacent
                last_group = group
                found = by_group.get(group)
                if found is None:
                    found = by_group[group] = {}
                    if task.changelog_partition >= 0:
                        changelog[group] = task.changelog_partition
                buckets = found
            bucket = task.key_bucket
            buckets[bucket if bucket > 0 else 0] = name
    factor = previous.config.get("elasticityFactor")
    return PreviousAssignment(
        int(factor) if factor is not None else elasticity_factor_of(tasks.values()),
        owner,
        {k: tuple(sorted(set(v))) for k, v in holders.items()},
        tasks,
        by_group,
        changelog,
    )
