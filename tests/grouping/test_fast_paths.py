"""Fast paths of the assignment give exactly what the general code gives.

The placer books the units that follow their partition group's first unit to the same
processor in bulk (``Placer._follow``): the same as placing every unit on its own with
``_choose``, from scratch, after processors come and go, with last locations, with lags
(some caught up, some behind), stateless or stateful. A first generation indexes its tasks
without tracing lineage (``World._no_history``): the same as tracing them against a
previous model that had nothing."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouping.assignment import AssignmentParams
from grouping.assignment.placer import Placer
from grouping.assignment.world import World
from grouping.generation import GeneratedJobModel, generate_job_model
from grouping.groupers import (
    GroupByPartition,
    GroupBySystemStreamPartition,
    SspGrouper,
    group_tasks,
)
from grouping.model import JobModel, SystemStreamPartition


def lags_of(model: JobModel, rnd: random.Random) -> dict[str, dict[str, int]]:
    return {pid: {name: rnd.choice([0, 0, 5, 50_000]) for name in container.tasks}
            for pid, container in model.containers.items() if rnd.random() < 0.8}


def scenario(seed: int) -> tuple[GeneratedJobModel, GeneratedJobModel]:
    rnd = random.Random(seed)
    ssps = [SystemStreamPartition("kafka", "in", p) for p in range(rnd.randrange(1, 40))]
    hosts = rnd.choice([3, 50])  # shared hosts, or one per processor
    procs = {f"p{i:02d}": f"h{rnd.randrange(hosts)}" for i in range(rnd.randrange(1, 30))}
    stateful = rnd.random() < 0.5
    params = AssignmentParams(balance_factor=rnd.choice([1, 2]))
    factor = rnd.choice([1, 2, 4, 8])
    first = generate_job_model(1, ssps, GroupByPartition(), factor, procs, stateful=stateful,
                               params=params)
    live = {pid: loc for pid, loc in procs.items() if rnd.random() < 0.7} or procs
    live.update({f"n{i}": f"h{rnd.randrange(hosts)}" for i in range(rnd.randrange(4))})
    locality = {t: procs[pid] if rnd.random() < 0.8 else "gone"
                for pid, c in first.job_model.containers.items() for t in c.tasks
                if rnd.random() < 0.5} if rnd.random() < 0.5 else {}
    second = generate_job_model(
        2, ssps, GroupByPartition(), rnd.choice([factor, factor * 2, max(1, factor // 2)]),
        live, previous=first.job_model, task_locality=locality,
        task_lags=lags_of(first.job_model, rnd) if stateful else None, stateful=stateful,
        params=params)
    return first, second


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=10**9))
def test_bulk_followers_equal_placing_one_by_one(seed: int) -> None:
    bulk = scenario(seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Placer, "_follow", lambda self, orphans, i, k, j: i)
        one_by_one = scenario(seed)
    for a, b in zip(bulk, one_by_one, strict=True):
        assert a.job_model == b.job_model
        assert a.assignment.warmups == b.assignment.warmups


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10**9))
def test_a_first_generation_indexes_as_tracing_an_empty_previous_model(seed: int) -> None:
    rnd = random.Random(seed)
    groupers: list[SspGrouper] = [GroupByPartition(), GroupBySystemStreamPartition()]
    grouper = rnd.choice(groupers)
    ssps = [SystemStreamPartition("kafka", f"s{s}", p)
            for s in range(rnd.randrange(1, 3)) for p in range(rnd.randrange(1, 30))]
    factor = rnd.choice([1, 2, 4])
    tasks = group_tasks(grouper, ssps, factor)
    procs = {f"p{i}": f"h{rnd.randrange(4)}" for i in range(rnd.randrange(1, 8))}
    names = [t.name for t in tasks]
    locality = {n: rnd.choice(["h0", "h9"]) for n in names if rnd.random() < 0.5} \
        if rnd.random() < 0.5 else {}
    lags = {pid: {n: rnd.choice([0, 7, 90_000]) for n in names if rnd.random() < 0.3}
            for pid in procs if rnd.random() < 0.5} if rnd.random() < 0.5 else {}
    kinds: list[bool | frozenset[str]] = [
        True, False, frozenset(n for n in names if rnd.random() < 0.5)]
    stateful = rnd.choice(kinds)
    empty = JobModel(0, {"elasticityFactor": factor, "sspGrouper": grouper.name}, {})
    first, traced = (World(list(reversed(tasks)), procs, previous, locality, lags, stateful,
                           AssignmentParams(), factor) for previous in (None, empty))
    for attribute in ("group", "sticky", "lag_of", "good"):
        assert getattr(first, attribute) == getattr(traced, attribute), attribute
    for world in (first, traced):  # read on demand, or all at once: the same
        assert world.lineage.all() == [world.lineage[u] for u in range(world.n)]
    assert first.lineage.all() == traced.lineage.all()
    assert ([first.locality[u] for u in range(first.n)]
            == [traced.locality[u] for u in range(traced.n)])
    assert [h.tasks for h in first.histories] == [h.tasks for h in traced.histories]
