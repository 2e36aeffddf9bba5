"""Job model generation: inputs + config + live processors + history -> the next job model.

This is what the leader runs on every rebalance; it composes the SSP grouper and the
task -> processor assignment, and stays pure (the caller supplies the version number).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from grouping.assignment import (
    AssignmentParams,
    AssignmentResult,
    AssignmentTrace,
    assign_tasks_traced,
)
from grouping.groupers import AllSspToSingleTask, SspGrouper, group_tasks
from grouping.key_bucket import DEFAULT_MAX_ELASTICITY_FACTOR
from grouping.lineage import PreviousAssignment
from grouping.model import ContainerModel, JobModel, SystemStreamPartition, TaskModel


@dataclass(frozen=True, slots=True)
class GeneratedJobModel:
    """The new job model and what its assignment still wants (probing, warm-ups)."""

    job_model: JobModel
    assignment: AssignmentResult


def generate_job_model(
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
    """Group ``inputs`` into tasks and assign them to ``processors`` as job model ``version``.

    ``stateful`` is True (every task), False (none) or a set of task names. The job model's
    config records the elasticity factor and grouper, plus ``extra_config``.
    """
    with gc_paused():
        return generate_traced(version, inputs, grouper, elasticity_factor, processors,
                               previous, task_locality, task_lags, stateful, params,
                               max_elasticity_factor, extra_config)[0]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while 100k+ acyclic tuples are made: otherwise
    it rescans the growing heap over and over (roughly halving generation time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _same_tasks(
    previous: JobModel, inputs: list[SystemStreamPartition], grouper: SspGrouper, factor: int
) -> list[TaskModel] | None:
    """The previous model's active tasks when grouping again would make exactly them."""
    if previous.ssp_grouper != grouper.name or previous.elasticity_factor != factor:
        return None
    if isinstance(grouper, AllSspToSingleTask):
        return None  # its tasks follow the processors, not the inputs
    index = PreviousAssignment.of(previous)
    grouped = {s for group in index.by_group for s in group}
    if grouped != {s.whole() for s in inputs}:
        return None
    # in container order: the assignment sorts its tasks by name itself
    return [t for c in previous.containers.values() for t in c.active_tasks]


def generate_traced(
    version: int,
    inputs: Iterable[SystemStreamPartition],
    grouper: SspGrouper,
    elasticity_factor: int,
    processors: Mapping[str, str],
    previous: JobModel | None,
    task_locality: Mapping[str, str] | None,
    task_lags: Mapping[str, Mapping[str, int]] | None,
    stateful: bool | AbstractSet[str],
    params: AssignmentParams | None,
    max_elasticity_factor: int,
    extra_config: Mapping[str, Any] | None,
    leftovers: list[object] | None = None,
) -> tuple[GeneratedJobModel, AssignmentTrace | None]:
    """:func:`generate_job_model` (without pausing the collector), and the assignment's
    trace (None when the grouper places tasks itself or no processor is live). With
    ``leftovers``, the large intermediates (grouper specs, the assignment's indexed
    inputs) go there instead of being freed, for the caller to free off the way to
    publication."""
    inputs = list(inputs)
    tasks = _same_tasks(previous, inputs, grouper, elasticity_factor) if previous else None
    if tasks is None:
        tasks = group_tasks(
            grouper, inputs, elasticity_factor,
            processor_ids=sorted(processors),
            previous=previous,
            max_elasticity_factor=max_elasticity_factor,
            leftovers=leftovers,
        )
    stateful_names: bool | AbstractSet[str] = (
        stateful if isinstance(stateful, bool) else stateful & {t.name for t in tasks})
    config = job_config(grouper, elasticity_factor, extra_config)
    trace = None
    if isinstance(grouper, AllSspToSingleTask):
        # One task per processor by construction: it runs on the processor it is named for.
        containers = [
            ContainerModel.of(pid, processors[pid], [t for t in tasks if t.name == f"Task-{pid}"])
            for pid in sorted(processors)
        ]
        result = AssignmentResult({c.processor_id: c for c in containers}, False)
    else:
        result, trace = assign_tasks_traced(
            tasks, processors,
            previous=previous,
            task_locality=task_locality,
            task_lags=task_lags,
            stateful=stateful_names,
            params=params,
            elasticity_factor=elasticity_factor,
            leftovers=leftovers,
        )
    return (GeneratedJobModel(JobModel.of(version, config, result.containers.values()), result),
            trace)


def job_config(
    grouper: SspGrouper, elasticity_factor: int, extra_config: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The job model's config: ``extra_config``, the elasticity factor and the grouper."""
    return {
        **(extra_config or {}),
        "elasticityFactor": elasticity_factor,
        "sspGrouper": grouper.name,
    }
