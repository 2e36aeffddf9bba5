"""The assignment's parameters (KIP-441's names), its result, and its trace."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from grouping.errors import InvalidAssignmentParams
from grouping.model import ContainerModel, TaskModel

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

    ``warmups`` are (active task, processor) pairs holding a warm-up standby copy: an
    extra copy, or one of the task's standbys placed on the processor its active should
    move to (then counted among the standbys, not beyond them). Whenever a probing
    rebalance is needed, some copy is a warm-up.
    ``movements`` maps stateful tasks whose active could not yet go to its balanced target
    (the target is not caught up) to that target processor.
    """

    containers: Mapping[str, ContainerModel]
    probing_rebalance_needed: bool
    warmups: frozenset[tuple[str, str]] = frozenset()
    movements: Mapping[str, str] = field(default_factory=dict)



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
