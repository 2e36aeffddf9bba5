"""Job model value types: SSP (with optional key bucket), task model, container model, job model.

All are immutable. Mappings held by them are read-only views over dicts built in sorted
key order, so iteration order is deterministic and equal to sorted order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import islice, pairwise
from operator import attrgetter, ge, itemgetter
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")

#: Key bucket value meaning "the whole partition" (Samza's convention).
WHOLE_PARTITION = -1


class _SspFields(NamedTuple):
    system: str
    stream: str
    partition: int
    key_bucket: int


class SystemStreamPartition(_SspFields):
    """(system, stream, partition) plus an optional key bucket (SEP-32's SSPKb).

    ``key_bucket == -1`` means the whole partition. The factor a bucket belongs to is not
    part of the SSP: it is the job model's elasticity factor. A tuple underneath, so that
    hashing, equality and ordering (system, stream, partition, bucket) run at C speed on
    job models with 100k tasks.
    """

    __slots__ = ()

    def __new__(
        cls, system: str, stream: str, partition: int, key_bucket: int = WHOLE_PARTITION
    ) -> SystemStreamPartition:
        if partition < 0:
            raise ValueError(f"partition must be >= 0, got {partition}")
        if key_bucket < WHOLE_PARTITION:
            raise ValueError(f"key bucket must be >= -1, got {key_bucket}")
        return tuple.__new__(cls, (system, stream, partition, key_bucket))

    @property
    def has_key_bucket(self) -> bool:
        """True when this SSP names one key bucket rather than the whole partition."""
        return self.key_bucket != WHOLE_PARTITION

    def whole(self) -> SystemStreamPartition:
        """The same partition without a key bucket."""
        if self.key_bucket == WHOLE_PARTITION:
            return self
        return tuple.__new__(SystemStreamPartition,
                             (self.system, self.stream, self.partition, WHOLE_PARTITION))

    def with_key_bucket(self, key_bucket: int) -> SystemStreamPartition:
        """The same partition restricted to ``key_bucket`` (-1 for the whole partition)."""
        if key_bucket < WHOLE_PARTITION:
            raise ValueError(f"key bucket must be >= -1, got {key_bucket}")
        return tuple.__new__(SystemStreamPartition,
                             (self.system, self.stream, self.partition, key_bucket))

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


class _TaskFields(NamedTuple):
    name: str
    ssps: tuple[SystemStreamPartition, ...]
    changelog_partition: int
    mode: TaskMode
    key_bucket: int
    partition_group: tuple[SystemStreamPartition, ...]


class TaskModel(_TaskFields):
    """One (virtual) task: its name, the SSPs (or SSPKbs) it reads, its changelog partition.

    Derived, read-only: ``key_bucket`` (the bucket shared by its SSPs, -1 for whole
    partitions) and ``partition_group`` (the whole partitions it reads; tasks sharing it
    split one partition by key). A tuple underneath: cheap to build 100k of.
    """

    __slots__ = ()

    def __new__(
        cls,
        name: str,
        ssps: tuple[SystemStreamPartition, ...],
        changelog_partition: int,
        mode: TaskMode = TaskMode.ACTIVE,
    ) -> TaskModel:
        if not name:
            raise ValueError("task name must not be empty")
        group: tuple[SystemStreamPartition, ...]
        if len(ssps) == 1:
            only = ssps[0]
            bucket = only.key_bucket
            group = ssps if bucket == WHOLE_PARTITION else (only.whole(),)
        else:
            if any(a >= b for a, b in pairwise(ssps)):
                ssps = tuple(sorted(set(ssps)))
            buckets = {s.key_bucket for s in ssps}
            bucket = buckets.pop() if len(buckets) == 1 else WHOLE_PARTITION
            if all(s.key_bucket == WHOLE_PARTITION for s in ssps):
                group = ssps
            else:
                group = tuple(sorted({s.whole() for s in ssps}))
        if mode.__class__ is not TaskMode:
            mode = TaskMode(mode)
        return tuple.__new__(cls, (name, tuple(ssps), changelog_partition, mode, bucket, group))

    @staticmethod
    def trusted(
        name: str,
        ssps: tuple[SystemStreamPartition, ...],
        changelog_partition: int,
        mode: TaskMode,
        key_bucket: int,
        partition_group: tuple[SystemStreamPartition, ...],
    ) -> TaskModel:
        """Build without checks or derivations, for groupers that already know them all
        (sorted SSPs sharing ``key_bucket``, and their whole partitions)."""
        return tuple.__new__(TaskModel, (name, ssps, changelog_partition, mode, key_bucket,
                                         partition_group))

    def _replace(self, **changes: Any) -> TaskModel:
        """A copy with some of name, ssps, changelog_partition and mode changed; the
        derived fields are derived again."""
        unknown = changes.keys() - {"name", "ssps", "changelog_partition", "mode"}
        if unknown:
            raise ValueError(f"cannot replace derived or unknown fields: {sorted(unknown)}")
        return TaskModel(
            changes.get("name", self.name),
            changes.get("ssps", self.ssps),
            changes.get("changelog_partition", self.changelog_partition),
            changes.get("mode", self.mode),
        )

    def with_mode(self, mode: TaskMode, name: str | None = None) -> TaskModel:
        """The same task in another mode (e.g. a standby copy under its standby name)."""
        return tuple.__new__(TaskModel, (name or self.name, self.ssps,
                                         self.changelog_partition, mode, self.key_bucket,
                                         self.partition_group))


_name_of = attrgetter("name")


def _frozen_mapping(items: Iterable[tuple[str, Any]]) -> Mapping[str, Any]:
    return MappingProxyType(dict(sorted(items, key=itemgetter(0))))


@dataclass(frozen=True, slots=True)
class ContainerModel:
    """The tasks one live processor runs, and where that processor is (its location id)."""

    processor_id: str
    location_id: str
    tasks: Mapping[str, TaskModel] = field(default_factory=lambda: MappingProxyType({}))
    # (active, standby) copies, split on first use: counted on every publication and
    # status request, for 100k tasks; the container never changes, so they stay valid
    _split: tuple[tuple[TaskModel, ...], tuple[TaskModel, ...]] | None = field(
        default=None, init=False, compare=False, repr=False)

    @staticmethod
    def of(processor_id: str, location_id: str, tasks: Iterable[TaskModel]) -> ContainerModel:
        """Build a container model; tasks are keyed by name in sorted order."""
        tasks = list(tasks)
        names = list(map(_name_of, tasks))
        by_name = zip(names, tasks, strict=True)
        if any(map(ge, names, islice(names, 1, None))):  # not already in order
            return ContainerModel(processor_id, location_id, _frozen_mapping(by_name))
        return ContainerModel(processor_id, location_id, MappingProxyType(dict(by_name)))

    @staticmethod
    def of_sorted(processor_id: str, location_id: str, names: Iterable[str],
                  tasks: Iterable[TaskModel]) -> ContainerModel:
        """:meth:`of` for tasks the caller already has in name order, with their names."""
        return ContainerModel(processor_id, location_id,
                              MappingProxyType(dict(zip(names, tasks, strict=True))))

    def without(self, names: Iterable[str]) -> ContainerModel:
        """This container without the named tasks (every one of them in it); the others
        keep their order. A processor giving a task up in an incremental rebalance: a
        copy of its mapping, not a rebuild from its tasks."""
        tasks = dict(self.tasks)
        for name in names:
            del tasks[name]
        return ContainerModel(self.processor_id, self.location_id, MappingProxyType(tasks))

    @property
    def active_tasks(self) -> tuple[TaskModel, ...]:
        """The active task models, in task-name order."""
        return self._modes()[0]

    @property
    def standby_tasks(self) -> tuple[TaskModel, ...]:
        """The standby (and warm-up) task models, in task-name order."""
        return self._modes()[1]

    def _modes(self) -> tuple[tuple[TaskModel, ...], tuple[TaskModel, ...]]:
        split = self._split
        if split is None:
            tasks = tuple(self.tasks.values())
            active = TaskMode.ACTIVE
            if all(t.mode is active for t in tasks):  # the usual container
                split = (tasks, ())
            else:
                split = (tuple(t for t in tasks if t.mode is active),
                         tuple(t for t in tasks if t.mode is not active))
            object.__setattr__(self, "_split", split)  # a cache, not a change
        return split


@dataclass(frozen=True, slots=True)
class JobModel:
    """A versioned, immutable assignment of tasks to processors, plus the job config."""

    version: int
    config: Mapping[str, Any]
    containers: Mapping[str, ContainerModel]
    # Derived indexes, built on first use by the modules that need them; the model never
    # changes, so they stay valid (see memo()).
    _memo: dict[str, Any] = field(default_factory=dict, init=False, compare=False, repr=False)

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

    def memo(self, key: str, build: Callable[[JobModel], T]) -> T:
        """``build(self)``, computed once per model and kept (the model is immutable)."""
        if key not in self._memo:
            self._memo[key] = build(self)
        value: T = self._memo[key]
        return value

    def memoized(self, key: str) -> bool:
        """Whether :meth:`memo` has built ``key`` for this model yet."""
        return key in self._memo

    def _active_index(self) -> tuple[dict[str, TaskModel], dict[str, str]]:
        def build(model: JobModel) -> tuple[dict[str, TaskModel], dict[str, str]]:
            tasks: dict[str, TaskModel] = {}
            owner: dict[str, str] = {}
            active = TaskMode.ACTIVE
            for pid, c in model.containers.items():
                for name, t in c.tasks.items():
                    if t.mode is active:
                        tasks[name] = t
                        owner[name] = pid
            return tasks, owner

        return self.memo("active", build)

    def active_owner(self) -> dict[str, str]:
        """task name -> processor id, for every active task (a fresh dict)."""
        return dict(self._active_index()[1])

    def active_tasks(self) -> dict[str, TaskModel]:
        """task name -> task model, for every active task of the model (a fresh dict)."""
        return dict(self._active_index()[0])

    def task_locations(self) -> dict[str, str]:
        """active task name -> the location id of its container (what the leader records
        as task locality once this model's barrier is done; a fresh dict)."""
        return {task.name: container.location_id for container in self.containers.values()
                for task in container.active_tasks}

    def container_of(self, processor_id: str) -> ContainerModel | None:
        """The container of ``processor_id``, or None when it is not in this model."""
        return self.containers.get(processor_id)
