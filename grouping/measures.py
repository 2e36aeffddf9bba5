"""Measures of an assignment: balance, moved tasks, and the lower bound on moves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grouping.assignment import window_targets
from grouping.lineage import PreviousAssignment
from grouping.model import ContainerModel, JobModel, TaskModel
from grouping.task_names import elasticity_factor_of

Containers = Mapping[str, ContainerModel]


def _containers(model: Containers | JobModel) -> Containers:
    return model.containers if isinstance(model, JobModel) else model


def balance(model: Containers | JobModel) -> int:
    """Max minus min number of active tasks per processor (0 with no processors)."""
    counts = [len(c.active_tasks) for c in _containers(model).values()]
    return max(counts) - min(counts) if counts else 0


def standby_balance(model: Containers | JobModel) -> int:
    """Max minus min number of standby copies per processor."""
    counts = [len(c.standby_tasks) for c in _containers(model).values()]
    return max(counts) - min(counts) if counts else 0


def _factor(containers: Containers) -> int:
    return elasticity_factor_of(t for c in containers.values() for t in c.active_tasks)


def sticky_owners(
    previous: JobModel | None, tasks: Sequence[TaskModel], alive: Mapping[str, object],
    elasticity_factor: int,
) -> dict[str, str | None]:
    """task -> live processor it should stay on (previous owner, parent's, children's)."""
    prev = PreviousAssignment.of(previous)
    return {
        t.name: prev.sticky_owner(prev.lineage(t, elasticity_factor), alive) for t in tasks
    }


def moved_tasks(
    previous: JobModel | None, new: Containers | JobModel, elasticity_factor: int | None = None
) -> int:
    """Active tasks of ``new`` not running on their sticky owner from ``previous``.

    A task whose previous owner (or parent's / children's owner) left counts as moved.
    """
    containers = _containers(new)
    owner = {t.name: pid for pid, c in containers.items() for t in c.active_tasks}
    tasks = [t for c in containers.values() for t in c.active_tasks]
    factor = elasticity_factor or _factor(containers)
    sticky = sticky_owners(previous, tasks, containers, factor)
    return sum(1 for t in tasks if sticky[t.name] != owner[t.name])


def lower_bound_moves(
    previous: JobModel | None,
    tasks: Sequence[TaskModel],
    processors: Sequence[str],
    balance_factor: int = 1,
    elasticity_factor: int | None = None,
) -> int:
    """The fewest tasks that must move for any assignment balanced within ``balance_factor``.

    Every task whose sticky owner is gone must move, and balance may force more off
    overloaded processors; :func:`grouping.assignment.window_targets` finds the best window.
    """
    if not processors:
        return 0
    alive = {pid: None for pid in processors}
    factor = elasticity_factor or elasticity_factor_of(tasks)
    sticky = sticky_owners(previous, tasks, alive, factor)
    index = {pid: j for j, pid in enumerate(sorted(processors))}
    keep = [0] * len(index)
    for owner in sticky.values():
        if owner is not None:
            keep[index[owner]] += 1
    targets = window_targets(keep, [0] * len(keep), len(tasks), balance_factor)
    return len(tasks) - targets.kept
