"""Job model value types: SSP (with optional key bucket), task model, container model, job model.

All are immutable. Mappings held by them are read-only views over dicts built in sorted
key order, so iteration order is deterministic and equal to sorted order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

#: Key bucket value meaning "the whole partition" (Samza's convention).
WHOLE_PARTITION = -1


@dataclass(frozen=True, order=True, slots=True)
class SystemStreamPartition:
    """(system, stream, partition) plus an optional key bucket (SEP-32's SSPKb).

    ``key_bucket == -1`` means the whole partition. The factor a bucket belongs to is not
    part of the SSP: it is the job model's elasticity factor.
    """

    system: str
    stream: str
    partition: int
    key_bucket: int = WHOLE_PARTITION

    def __post_init__(self) -> None:
        if self.partition < 0:
            raise ValueError(f"partition must be >= 0, got {self.partition}")
        if self.key_bucket < WHOLE_PARTITION:
            raise ValueError(f"key bucket must be >= -1, got {self.key_bucket}")

    @property
    def has_key_bucket(self) -> bool:
        """True when this SSP names one key bucket rather than the whole partition."""
        return self.key_bucket != WHOLE_PARTITION

    def whole(self) -> SystemStreamPartition:
        """The same partition without a key bucket."""
        if self.key_bucket == WHOLE_PARTITION:
            return self
        return SystemStreamPartition(self.system, self.stream, self.partition)

    def with_key_bucket(self, key_bucket: int) -> SystemStreamPartition:
        """The same partition restricted to ``key_bucket`` (-1 for the whole partition)."""
        return SystemStreamPartition(self.system, self.stream, self.partition, key_bucket)

    def __str__(self) -> str:
        if self.key_bucket == WHOLE_PARTITION:
            return f"SystemStreamPartition [{self.system}, {self.stream}, {self.partition}]"
        return (
            f"SystemStreamPartition [{self.system}, {self.stream}, "
            f"{self.partition}, {self.key_bucket}]"
        )


#: The short name used throughout the design documents.
SSP = SystemStreamPartition


class TaskMode(StrEnum):
    """Whether a task model is the processing copy or a standby (incl. warm-up) copy."""

    ACTIVE = "Active"
    STANDBY = "Standby"


@dataclass(frozen=True, slots=True)
class TaskModel:
    """One (virtual) task: its name, the SSPs (or SSPKbs) it reads, its changelog partition."""

    name: str
    ssps: tuple[SystemStreamPartition, ...]
    changelog_partition: int
    mode: TaskMode = TaskMode.ACTIVE

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("task name must not be empty")
        ordered = tuple(sorted(set(self.ssps)))
        if ordered != self.ssps:
            object.__setattr__(self, "ssps", ordered)

    @property
    def key_bucket(self) -> int:
        """The key bucket shared by this task's SSPs (-1 when it reads whole partitions)."""
        buckets = {ssp.key_bucket for ssp in self.ssps}
        if len(buckets) == 1:
            return next(iter(buckets))
        return WHOLE_PARTITION

    @property
    def partition_group(self) -> tuple[SystemStreamPartition, ...]:
        """The whole partitions this task reads from: tasks sharing it split one partition."""
        return tuple(sorted({ssp.whole() for ssp in self.ssps}))


def _frozen_mapping(items: Iterable[tuple[str, Any]]) -> Mapping[str, Any]:
    return MappingProxyType(dict(sorted(items, key=lambda kv: kv[0])))


@dataclass(frozen=True, slots=True)
class ContainerModel:
    """The tasks one live processor runs, and where that processor is (its location id)."""

    processor_id: str
    location_id: str
    tasks: Mapping[str, TaskModel] = field(default_factory=lambda: MappingProxyType({}))

    @staticmethod
    def of(processor_id: str, location_id: str, tasks: Iterable[TaskModel]) -> ContainerModel:
        """Build a container model; tasks are keyed by name in sorted order."""
        return ContainerModel(
            processor_id, location_id, _frozen_mapping((t.name, t) for t in tasks)
        )

    @property
    def active_tasks(self) -> tuple[TaskModel, ...]:
        """The active task models, in task-name order."""
        return tuple(t for t in self.tasks.values() if t.mode is TaskMode.ACTIVE)

    @property
    def standby_tasks(self) -> tuple[TaskModel, ...]:
        """The standby (and warm-up) task models, in task-name order."""
        return tuple(t for t in self.tasks.values() if t.mode is TaskMode.STANDBY)


@dataclass(frozen=True, slots=True)
class JobModel:
    """A versioned, immutable assignment of tasks to processors, plus the job config."""

    version: int
    config: Mapping[str, Any]
    containers: Mapping[str, ContainerModel]

    @staticmethod
    def of(
        version: int, config: Mapping[str, Any], containers: Iterable[ContainerModel]
    ) -> JobModel:
        """Build a job model; containers are keyed by processor id in sorted order."""
        if version < 0:
            raise ValueError(f"job model version must be >= 0, got {version}")
        return JobModel(
            version,
            MappingProxyType(dict(config)),
            _frozen_mapping((c.processor_id, c) for c in containers),
        )

    @property
    def elasticity_factor(self) -> int:
        """The elasticity factor the tasks of this model were grouped with (default 1)."""
        return int(self.config.get("elasticityFactor", 1))

    @property
    def ssp_grouper(self) -> str | None:
        """The name of the SSP grouper that produced the tasks, when recorded."""
        value = self.config.get("sspGrouper")
        return None if value is None else str(value)

    def active_owner(self) -> dict[str, str]:
        """task name -> processor id, for every active task."""
        return {
            name: c.processor_id
            for c in self.containers.values()
            for name, t in c.tasks.items()
            if t.mode is TaskMode.ACTIVE
        }

    def active_tasks(self) -> dict[str, TaskModel]:
        """task name -> task model, for every active task of the model."""
        return {
            name: t
            for c in self.containers.values()
            for name, t in c.tasks.items()
            if t.mode is TaskMode.ACTIVE
        }

    def container_of(self, processor_id: str) -> ContainerModel | None:
        """The container of ``processor_id``, or None when it is not in this model."""
        return self.containers.get(processor_id)
