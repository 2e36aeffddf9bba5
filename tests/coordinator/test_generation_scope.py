"""The coordinator enters its generation scope around each job model's generation and its
preparation (the service pauses the collector there and freezes the new model)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from coordinator.clock import SystemClock
from coordinator.leader import EmbeddedLeader
from coordinator.lifecycle import Coordinator, CoordinatorConfig
from coordinator.store.sql import SqlMetadataStore
from grouping.model import SSP, JobModel
from service.database import make_engine, upgrade
from tests.coordinator.rebalanced import rebalanced


async def _scenario(tmp_path: Path) -> tuple[list[str], int]:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    events: list[str] = []

    @contextmanager
    def scope() -> Iterator[None]:
        events.append("enter")
        yield
        events.append("exit")

    def prepare(model: JobModel) -> None:
        events.append(f"prepare {model.version}")

    config = CoordinatorConfig(inputs=tuple(SSP("kafka", "orders", p) for p in range(4)),
                               debounce_s=60)
    coordinator = Coordinator(config, SqlMetadataStore(engine), EmbeddedLeader("r1"),
                              SystemClock(), prepare=prepare, generation_scope=scope)
    await coordinator.start()
    try:
        await coordinator.register("p1", "h1", None)
        model = await rebalanced(coordinator)
        return events, model.version
    finally:
        await coordinator.stop()


def test_generation_and_preparation_run_inside_the_scope(tmp_path: Path) -> None:
    events, version = asyncio.run(_scenario(tmp_path))
    assert f"prepare {version}" in events
    # every generation: entered, prepared, left; none outside the scope
    assert len(events) % 3 == 0
    for i in range(0, len(events), 3):
        assert events[i] == "enter" and events[i + 1].startswith("prepare ")
        assert events[i + 2] == "exit"
