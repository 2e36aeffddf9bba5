"""SSP groupers with elasticity (SEP-32): input partitions -> (virtual) task models.

* GroupByPartition: task ``Partition p`` holds partition p of every input stream; with
  elasticity factor F > 1 it becomes F virtual tasks ``Partition p_b_F``, each holding key
  bucket b of partition p of every stream.
* GroupBySystemStreamPartition: one task per SSP, F virtual tasks per SSP when F > 1.
* AllSspToSingleTask: one task per processor, each holding every SSP; refuses F > 1
  because per-processor tasks cannot be split by key.

Changelog partitions: a task known from the previous job model keeps its partition; a
virtual task uses the partition its partition group had (so the buckets of one input
partition share one changelog partition); a new group gets its input partition number
(GroupByPartition) or the next unused number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from grouping.errors import UnsupportedGrouperConfiguration
from grouping.key_bucket import DEFAULT_MAX_ELASTICITY_FACTOR, validate_elasticity_factor
from grouping.model import WHOLE_PARTITION, SystemStreamPartition, TaskModel
from grouping.task_names import partition_task_name, ssp_task_name

PartitionGroup = tuple[SystemStreamPartition, ...]


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """A task as a grouper makes it, before its changelog partition is settled."""

    name: str
    ssps: tuple[SystemStreamPartition, ...]
    group: PartitionGroup
    changelog_hint: int | None


class SspGrouper(Protocol):
    """Groups input SSPs into task specs for a given elasticity factor."""

    name: ClassVar[str]

    def group(
        self,
        ssps: Iterable[SystemStreamPartition],
        elasticity_factor: int,
        processor_ids: Sequence[str] = (),
    ) -> list[TaskSpec]:
        """Task specs in a deterministic (sorted) order."""
        ...


def _buckets(factor: int) -> range:
    return range(factor) if factor > 1 else range(WHOLE_PARTITION, WHOLE_PARTITION + 1)


def _whole_sorted(ssps: Iterable[SystemStreamPartition]) -> list[SystemStreamPartition]:
    return sorted({s.whole() for s in ssps})


class GroupByPartition:
    """``Partition p`` / ``Partition p_b_F``: partition p of every input stream together."""

    name: ClassVar[str] = "GroupByPartition"

    def group(
        self,
        ssps: Iterable[SystemStreamPartition],
        elasticity_factor: int,
        processor_ids: Sequence[str] = (),
    ) -> list[TaskSpec]:
        """One spec per (partition, key bucket)."""
        by_partition: dict[int, list[SystemStreamPartition]] = {}
        for ssp in _whole_sorted(ssps):
            by_partition.setdefault(ssp.partition, []).append(ssp)
        specs = []
        for partition in sorted(by_partition):
            group = tuple(by_partition[partition])
            for bucket in _buckets(elasticity_factor):
                specs.append(TaskSpec(
                    partition_task_name(partition, max(bucket, 0), elasticity_factor),
                    tuple(s.with_key_bucket(bucket) for s in group),
                    group,
                    partition,
                ))
        return specs


class GroupBySystemStreamPartition:
    """``SystemStreamPartition [s, st, p]`` / ``...[s, st, p, b]_F``: one task per SSP(Kb)."""

    name: ClassVar[str] = "GroupBySystemStreamPartition"

    def group(
        self,
        ssps: Iterable[SystemStreamPartition],
        elasticity_factor: int,
        processor_ids: Sequence[str] = (),
    ) -> list[TaskSpec]:
        """One spec per (SSP, key bucket)."""
        specs = []
        for ssp in _whole_sorted(ssps):
            for bucket in _buckets(elasticity_factor):
                specs.append(TaskSpec(
                    ssp_task_name(ssp, max(bucket, 0), elasticity_factor),
                    (ssp.with_key_bucket(bucket),),
                    (ssp,),
                    None,
                ))
        return specs


class AllSspToSingleTask:
    """``Task-{processorId}``: one task per live processor, each reading every SSP."""

    name: ClassVar[str] = "AllSspToSingleTask"

    def group(
        self,
        ssps: Iterable[SystemStreamPartition],
        elasticity_factor: int,
        processor_ids: Sequence[str] = (),
    ) -> list[TaskSpec]:
        """One spec per processor; refuses an elasticity factor above 1."""
        if elasticity_factor != 1:
            raise UnsupportedGrouperConfiguration(
                "AllSspToSingleTask gives every processor all SSPs, so its tasks cannot be "
                f"split into key buckets: elasticity factor must be 1, got {elasticity_factor}"
            )
        if not processor_ids:
            raise UnsupportedGrouperConfiguration(
                "AllSspToSingleTask needs at least one processor to make a task for"
            )
        whole = tuple(_whole_sorted(ssps))
        return [
            TaskSpec(f"Task-{pid}", whole, whole, None) for pid in sorted(set(processor_ids))
        ]


GROUPERS: Mapping[str, type[GroupByPartition | GroupBySystemStreamPartition | AllSspToSingleTask]]
GROUPERS = {
    GroupByPartition.name: GroupByPartition,
    GroupBySystemStreamPartition.name: GroupBySystemStreamPartition,
    AllSspToSingleTask.name: AllSspToSingleTask,
}


def grouper_by_name(name: str) -> SspGrouper:
    """The grouper called ``name`` (see ``GROUPERS``)."""
    try:
        return GROUPERS[name]()
    except KeyError:
        known = ", ".join(sorted(GROUPERS))
        raise UnsupportedGrouperConfiguration(
            f"unknown SSP grouper {name!r}; known groupers: {known}"
        ) from None


def group_tasks(
    grouper: SspGrouper,
    ssps: Iterable[SystemStreamPartition],
    elasticity_factor: int,
    *,
    processor_ids: Sequence[str] = (),
    previous_tasks: Iterable[TaskModel] = (),
    max_elasticity_factor: int = DEFAULT_MAX_ELASTICITY_FACTOR,
) -> list[TaskModel]:
    """Group ``ssps`` into active task models with settled changelog partitions.

    ``previous_tasks`` are the active tasks of the previous job model: their changelog
    partitions are kept (by task name, then by partition group).
    """
    validate_elasticity_factor(elasticity_factor, max_elasticity_factor)
    specs = grouper.group(ssps, elasticity_factor, processor_ids)
    by_name: dict[str, int] = {}
    by_group: dict[PartitionGroup, int] = {}
    for task in sorted(previous_tasks, key=lambda t: t.name):
        if task.changelog_partition < 0:
            continue
        by_name[task.name] = task.changelog_partition
        by_group.setdefault(task.partition_group, task.changelog_partition)
    used = set(by_name.values())
    chosen: dict[PartitionGroup, int] = {}
    pending: list[PartitionGroup] = []
    pending_set: set[PartitionGroup] = set()
    for spec in specs:
        if spec.name in by_name:
            chosen.setdefault(spec.group, by_name[spec.name])
        elif spec.group in by_group:
            chosen.setdefault(spec.group, by_group[spec.group])
    used |= set(chosen.values())
    for spec in specs:
        if spec.group in chosen or spec.group in pending_set:
            continue
        hint = spec.changelog_hint
        if hint is not None and hint not in used:
            chosen[spec.group] = hint
            used.add(hint)
        else:
            pending.append(spec.group)
            pending_set.add(spec.group)
    next_free = max(used, default=-1) + 1
    for group in pending:
        chosen[group] = next_free
        next_free += 1
    return [
        TaskModel(spec.name, spec.ssps, by_name.get(spec.name, chosen[spec.group]))
        for spec in specs
    ]
