"""With one standby per task, the standby placer that tracks nothing gives exactly what
the general placer (which tracks every placed copy of a task) gives."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouping.assignment import AssignmentParams
from grouping.assignment import assign as assign_module
from grouping.generation import GeneratedJobModel, generate_job_model
from grouping.groupers import GroupByPartition
from grouping.model import JobModel, SystemStreamPartition
from grouping.task_names import parse_standby_task_name


def lags_of(model: JobModel, rnd: random.Random) -> dict[str, dict[str, int]]:
    """Reports of most processors for every copy they hold (some behind)."""
    reports: dict[str, dict[str, int]] = {}
    for pid, container in model.containers.items():
        if rnd.random() < 0.8:
            reports[pid] = {}
            for name in container.tasks:
                standby = parse_standby_task_name(name)
                reports[pid][standby[0] if standby else name] = rnd.choice([0, 3, 50])
    return reports


def scenario(seed: int) -> tuple[GeneratedJobModel, GeneratedJobModel]:
    """A model with one standby per task, then the next one after processors left and
    joined and the factor maybe changed."""
    rnd = random.Random(seed)
    ssps = [SystemStreamPartition("kafka", "in", p) for p in range(rnd.randrange(1, 12))]
    procs = {f"p{i:02d}": f"h{rnd.randrange(3)}" for i in range(rnd.randrange(1, 12))}
    params = AssignmentParams(num_standbys=1, acceptable_recovery_lag=10,
                              max_warmup_replicas=rnd.choice([1, 2]))
    factor = rnd.choice([1, 2, 4])
    first = generate_job_model(1, ssps, GroupByPartition(), factor, procs, stateful=True,
                               params=params)
    live = {pid: loc for pid, loc in procs.items() if rnd.random() < 0.8} or procs
    live.update({f"n{i}": f"h{rnd.randrange(3)}" for i in range(rnd.randrange(3))})
    second = generate_job_model(
        2, ssps, GroupByPartition(), rnd.choice([factor, factor * 2, max(1, factor // 2)]),
        live, previous=first.job_model, task_lags=lags_of(first.job_model, rnd),
        stateful=True, params=params)
    return first, second


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10**9))
def test_one_copy_placer_equals_the_tracking_placer(seed: int) -> None:
    fast = scenario(seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(assign_module, "_one_copy_placer", assign_module._tracking_placer)
        tracked = scenario(seed)
    for a, b in zip(fast, tracked, strict=True):
        assert a.job_model == b.job_model
        assert a.assignment == b.assignment
