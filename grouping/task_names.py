"""Task names: formatting and parsing of the names in API.md, and standby copy names.

GroupByPartition: ``Partition {p}`` (factor 1) or ``Partition {p}_{bucket}_{factor}``.
GroupBySystemStreamPartition: ``SystemStreamPartition [{system}, {stream}, {p}]`` or
``SystemStreamPartition [{system}, {stream}, {p}, {bucket}]_{factor}``.
Standby copies: ``Standby-{taskName}-{replica}``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from grouping.model import SystemStreamPartition, TaskModel

_PARTITION = re.compile(r"^Partition (\d+)(?:_(\d+)_(\d+))?$")
_SSP = re.compile(r"^SystemStreamPartition \[([^,\]]+), ([^,\]]+), (\d+)(?:, (\d+)\]_(\d+)|\])$")
_STANDBY_PREFIX = "Standby-"


@dataclass(frozen=True, slots=True)
class TaskNameParts:
    """What a grouper-made task name says: partition, key bucket and elasticity factor.

    ``system`` and ``stream`` are None for GroupByPartition names, which span streams.
    """

    partition: int
    key_bucket: int
    elasticity_factor: int
    system: str | None = None
    stream: str | None = None


def partition_task_name(partition: int, key_bucket: int = 0, factor: int = 1) -> str:
    """GroupByPartition's name for bucket ``key_bucket`` of partition ``partition``."""
    if factor == 1:
        return f"Partition {partition}"
    return f"Partition {partition}_{key_bucket}_{factor}"


def ssp_task_name(ssp: SystemStreamPartition, key_bucket: int = 0, factor: int = 1) -> str:
    """GroupBySystemStreamPartition's name for bucket ``key_bucket`` of ``ssp``."""
    base = f"SystemStreamPartition [{ssp.system}, {ssp.stream}, {ssp.partition}"
    if factor == 1:
        return base + "]"
    return f"{base}, {key_bucket}]_{factor}"


def standby_task_name(active_task_name: str, replica: int) -> str:
    """The name of standby copy number ``replica`` (0-based) of an active task."""
    return f"Standby-{active_task_name}-{replica}"


def parse_standby_task_name(name: str) -> tuple[str, int] | None:
    """(active task name, replica) for a standby copy's name, else None."""
    # string operations rather than a regex: `.` would not match a newline in a name
    if not name.startswith(_STANDBY_PREFIX):
        return None
    active, dash, replica = name[len(_STANDBY_PREFIX):].rpartition("-")
    if not dash or not active or not replica.isdecimal():
        return None
    return active, int(replica)


def parse_task_name(name: str) -> TaskNameParts | None:
    """Parse a grouper-made task name; None for names no grouper here makes."""
    m = _PARTITION.match(name)
    if m is not None:
        if m.group(2) is None:
            return TaskNameParts(int(m.group(1)), 0, 1)
        return TaskNameParts(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    m = _SSP.match(name)
    if m is not None:
        system, stream, partition = m.group(1), m.group(2), int(m.group(3))
        if m.group(4) is None:
            return TaskNameParts(partition, 0, 1, system, stream)
        return TaskNameParts(partition, int(m.group(4)), int(m.group(5)), system, stream)
    return None


def elasticity_factor_of(tasks: Iterable[TaskModel]) -> int:
    """The elasticity factor named by the first bucketed task (1 when none is bucketed)."""
    for t in tasks:
        if t.key_bucket >= 0:
            parts = parse_task_name(t.name)
            if parts is not None:
                return parts.elasticity_factor
    return 1
