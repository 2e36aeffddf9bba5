"""Acks that only add to a pending barrier are taken without the lifecycle's lock: they
answer while a registration holds it (its store write stalled), and the ack that
completes the barrier still records the active version."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from sqlalchemy import Engine

from coordinator.barrier import BarrierState
from coordinator.clock import SystemClock
from coordinator.leadership.role import EmbeddedLeader
from coordinator.lifecycle import Coordinator, CoordinatorConfig
from coordinator.membership import NAMESPACE
from coordinator.store.sql import SqlMetadataStore
from grouping.model import SSP
from service.database import make_engine, upgrade
from tests.coordinator.rebalanced import rebalanced


class StallingStore(SqlMetadataStore):
    """The real SQL store; lease writes wait for ``go`` while ``stall`` is set, and say
    so (``stalled``)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.stall = threading.Event()
        self.stalled = threading.Event()
        self.go = threading.Event()

    def put(self, namespace: str, key: str, value: bytes) -> int:
        if namespace == NAMESPACE and self.stall.is_set():
            self.stalled.set()
            self.go.wait(10)
        return super().put(namespace, key, value)


async def _scenario(tmp_path: Path) -> tuple[BarrierState, bool, BarrierState, int | None]:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    config = CoordinatorConfig(inputs=tuple(SSP("kafka", "orders", p) for p in range(4)),
                               debounce_s=60, barrier_timeout_s=30)
    store = StallingStore(engine)
    coordinator = Coordinator(config, store, EmbeddedLeader("r1"), SystemClock())
    await coordinator.start()
    try:
        for pid in ("p1", "p2"):
            await coordinator.register(pid, f"h-{pid}", None)
        model = await rebalanced(coordinator)
        store.stall.set()
        joining = asyncio.create_task(coordinator.register("p3", "h-p3", None))
        # it holds the lock once its write stalls (on a loaded machine, maybe seconds on)
        assert await asyncio.to_thread(store.stalled.wait, 30)
        first = await asyncio.wait_for(coordinator.ack(model.version, "p1"), 5.0)
        still_joining = not joining.done()
        store.go.set()
        await joining
        last = await asyncio.wait_for(coordinator.ack(model.version, "p2"), 5.0)
        active = coordinator.active
        return first, still_joining, last, None if active is None else active.version
    finally:
        store.go.set()
        await coordinator.stop()


def test_an_ack_answers_while_the_lock_is_held_and_the_last_one_completes(
        tmp_path: Path) -> None:
    first, still_joining, last, active = asyncio.run(_scenario(tmp_path))
    assert (first, still_joining) == (BarrierState.PENDING, True)
    assert (last, active) == (BarrierState.DONE, 1)
