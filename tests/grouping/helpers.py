"""Builders that let assignment tests state a world as data."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from grouping.assignment import AssignmentResult
from grouping.model import ContainerModel, JobModel, SystemStreamPartition, TaskMode, TaskModel
from grouping.task_names import parse_standby_task_name, standby_task_name


def task(name: str, partition: int = 0) -> TaskModel:
    """A one-SSP task named ``name`` reading partition ``partition`` of kafka.in."""
    return TaskModel(name, (SystemStreamPartition("kafka", "in", partition),), partition)


def tasks(*names: str) -> list[TaskModel]:
    """Tasks T1..Tn, each on its own partition (so they are not partition siblings)."""
    return [task(n, i) for i, n in enumerate(names)]


def job_model(
    layout: Mapping[str, tuple[Iterable[str], Iterable[str]]],
    all_tasks: Iterable[TaskModel],
    version: int = 1,
    locations: Mapping[str, str] | None = None,
) -> JobModel:
    """A job model from {processor: (active task names, standby task names)}."""
    by_name = {t.name: t for t in all_tasks}
    containers = []
    for pid, (actives, standbys) in layout.items():
        models = [by_name[n] for n in actives]
        for r, n in enumerate(standbys):
            t = by_name[n]
            models.append(TaskModel(standby_task_name(n, r), t.ssps, t.changelog_partition,
                                    TaskMode.STANDBY))
        loc = (locations or {}).get(pid, f"host-{pid}")
        containers.append(ContainerModel.of(pid, loc, models))
    return JobModel.of(version, {}, containers)


def layout_of(
    containers: Mapping[str, ContainerModel] | AssignmentResult | JobModel,
) -> dict[str, tuple[list[str], list[str]]]:
    """{processor: (sorted active names, sorted standby active-names)}: easy to compare."""
    if isinstance(containers, AssignmentResult | JobModel):
        containers = containers.containers
    out: dict[str, tuple[list[str], list[str]]] = {}
    for pid, c in containers.items():
        actives = sorted(t.name for t in c.active_tasks)
        standbys = []
        for t in c.standby_tasks:
            parsed = parse_standby_task_name(t.name)
            assert parsed is not None
            standbys.append(parsed[0])
        out[pid] = (actives, sorted(standbys))
    return out


def as_job_model(result: AssignmentResult, version: int) -> JobModel:
    """Wrap an assignment result as the job model of ``version``."""
    return JobModel.of(version, {}, result.containers.values())
