"""What the previous job model says about a task, across elasticity changes.

A task of the new model descends from the previous model's tasks whose key space overlaps
its own within the same partition group: the task itself (same name), its parent after a
split (F doubled), or its children after a merge (F halved). Stickiness, locality and lag
all follow this lineage, so a split child prefers its parent's processor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from grouping.model import JobModel, TaskMode, TaskModel
from grouping.task_names import elasticity_factor_of, parse_standby_task_name

PartitionGroup = tuple[object, ...]


@dataclass(frozen=True, slots=True)
class PreviousAssignment:
    """The parts of a previous job model the assignment needs, indexed for lookups."""

    factor: int = 1
    owner: Mapping[str, str] = field(default_factory=dict)
    standby_holders: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    by_bucket: Mapping[tuple[PartitionGroup, int], str] = field(default_factory=dict)

    @staticmethod
    def of(previous: JobModel | None) -> PreviousAssignment:
        """Index ``previous`` (None: no history)."""
        if previous is None:
            return PreviousAssignment()
        owner: dict[str, str] = {}
        holders: dict[str, list[str]] = {}
        by_bucket: dict[tuple[PartitionGroup, int], str] = {}
        for pid, container in previous.containers.items():
            for name, task in container.tasks.items():
                if task.mode is TaskMode.ACTIVE:
                    owner[name] = pid
                    by_bucket[(task.partition_group, max(task.key_bucket, 0))] = name
                else:
                    parsed = parse_standby_task_name(name)
                    if parsed is not None:
                        holders.setdefault(parsed[0], []).append(pid)
        factor = previous.config.get("elasticityFactor")
        return PreviousAssignment(
            int(factor) if factor is not None else elasticity_factor_of(
                t for c in previous.containers.values() for t in c.active_tasks),
            owner,
            {k: tuple(sorted(set(v))) for k, v in holders.items()},
            by_bucket,
        )

    def lineage(self, task: TaskModel, factor: int) -> tuple[str, ...]:
        """Names of the previous active tasks whose key space overlaps ``task``'s."""
        if task.name in self.owner:
            return (task.name,)
        if not self.by_bucket:
            return ()
        group = task.partition_group
        bucket = max(task.key_bucket, 0)
        if self.factor <= factor:
            parent = self.by_bucket.get((group, bucket & (self.factor - 1)))
            return () if parent is None else (parent,)
        children = (self.by_bucket.get((group, b)) for b in range(bucket, self.factor, factor))
        return tuple(c for c in children if c is not None)

    def sticky_owner(self, lineage: Iterable[str], alive: Mapping[str, object]) -> str | None:
        """The live processor that held most of ``lineage`` (ties: smallest processor id)."""
        counts: dict[str, int] = {}
        for name in lineage:
            pid = self.owner.get(name)
            if pid is not None and pid in alive:
                counts[pid] = counts.get(pid, 0) + 1
        if not counts:
            return None
        return min(counts, key=lambda pid: (-counts[pid], pid))
