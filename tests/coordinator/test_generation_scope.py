"""The coordinator enters its generation scope around each job model's generation and its
preparation (the service pauses the collector there and freezes the new model)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from coordinator.clock import SystemClock
from coordinator.leadership.role import EmbeddedLeader
from coordinator.lifecycle import Coordinator, CoordinatorConfig
from coordinator.store.sql import SqlMetadataStore
from grouping.lineage import PreviousAssignment
from grouping.model import SSP, JobModel
from service.database import make_engine, upgrade
from tests.coordinator.rebalanced import rebalanced


def _recording_coordinator(tmp_path: Path, events: list[str]) -> Coordinator:
    """A leader on SQLite whose generation scope and preparation record what they see."""
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)

    @contextmanager
    def scope() -> Iterator[None]:
        events.append("enter")
        yield
        events.append("exit")

    def prepare(model: JobModel) -> None:
        events.append(f"prepare {model.version}")

    config = CoordinatorConfig(inputs=tuple(SSP("kafka", "orders", p) for p in range(4)),
                               debounce_s=60)
    return Coordinator(config, SqlMetadataStore(engine), EmbeddedLeader("r1"),
                       SystemClock(), prepare=prepare, generation_scope=scope)


async def _scenario(tmp_path: Path) -> tuple[list[str], int, bool, bool]:
    """One processor, one model, its barrier done: what the scope saw, the model's
    version, and whether its lineage was indexed before the barrier ended and after."""
    events: list[str] = []
    coordinator = _recording_coordinator(tmp_path, events)
    await coordinator.start()
    try:
        await coordinator.register("p1", "h1", None)
        model = await rebalanced(coordinator)
        at_publication = PreviousAssignment.indexed(model)
        await asyncio.sleep(0.1)
        before_barrier = PreviousAssignment.indexed(model)
        await coordinator.ack(model.version, "p1")  # the barrier is done
        deadline = asyncio.get_running_loop().time() + 10
        while not PreviousAssignment.indexed(model) \
                and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        return (events, model.version, at_publication or before_barrier,
                PreviousAssignment.indexed(model))
    finally:
        await coordinator.stop()


def test_generation_and_preparation_run_inside_the_scope(tmp_path: Path) -> None:
    events, version, _, _ = asyncio.run(_scenario(tmp_path))
    assert f"prepare {version}" in events
    # every generation: entered, prepared, left; none outside the scope (a model's
    # lineage index is built in the scope too: entered and left, no preparation)
    i = 0
    while i < len(events):
        assert events[i] == "enter"
        if events[i + 1].startswith("prepare "):
            assert events[i + 2] == "exit"
            i += 3
        else:
            assert events[i + 1] == "exit"
            i += 2


def test_a_model_is_indexed_for_the_next_generation_once_its_barrier_is_done(
        tmp_path: Path) -> None:
    # The next full generation (a factor change, standbys) reads the published model's
    # lineage index; the leader builds it once the barrier is done and it was idle a
    # while (not on the way to publication, nor beside the processors' fetches and acks),
    # not at the next trigger.
    events, _, early, later = asyncio.run(_scenario(tmp_path))
    assert not early
    assert later
    # a generation (entered, prepared, left), then the index (entered and left)
    assert events.count("enter") == events.count("exit") > sum(
        e.startswith("prepare ") for e in events) >= 1


def test_a_rebalance_records_its_generation_apart_from_its_preparation(
        tmp_path: Path) -> None:
    # /status's generationSeconds is the model's computation (what an assignor's figure
    # is); rendering the answers and waiting for the lock are prepareSeconds
    async def scenario() -> tuple[float, float]:
        engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
        upgrade(engine)
        config = CoordinatorConfig(inputs=tuple(SSP("kafka", "orders", p) for p in range(4)),
                                   debounce_s=60)
        coordinator = Coordinator(config, SqlMetadataStore(engine), EmbeddedLeader("r1"),
                                  SystemClock(), prepare=lambda _: time.sleep(0.5))
        await coordinator.start()
        try:
            await coordinator.register("p1", "h1", None)
            await rebalanced(coordinator)
            last = coordinator.last_rebalance
            assert last is not None
            return last.generation_seconds, last.prepare_seconds
        finally:
            await coordinator.stop()

    generation, preparation = asyncio.run(scenario())
    assert preparation >= 0.5
    assert 0 < generation < preparation
