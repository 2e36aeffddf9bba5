"""A coordinator that was stalled reads the heartbeats of that time before it expires any
lease: the first sweep after the stall expires none, the next one (on time) does."""

from __future__ import annotations

import asyncio
from pathlib import Path

from coordinator.leader import EmbeddedLeader
from coordinator.lifecycle import Coordinator, CoordinatorConfig
from coordinator.store.sql import SqlMetadataStore
from grouping.model import SSP
from service.database import make_engine, upgrade
from tests.coordinator.fake_clock import FakeClock


async def _scenario(tmp_path: Path) -> tuple[bool, bool, bool]:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    clock = FakeClock()
    config = CoordinatorConfig(inputs=(SSP("kafka", "orders", 0),), lease_ttl_s=10.0,
                               heartbeat_interval_s=2.0, debounce_s=0.05)
    coordinator = Coordinator(config, SqlMetadataStore(engine), EmbeddedLeader("r1"), clock)
    await coordinator.start()
    try:
        await coordinator.register("p1", "h1", None)
        await coordinator.liveness.sweep()  # on time: nothing has run out
        before = "p1" in coordinator.membership.live()
        clock.t += 30  # this process stalled for 30 s: p1's heartbeats are unread
        await coordinator.liveness.sweep()
        after_stall = "p1" in coordinator.membership.live()
        await coordinator.liveness.sweep()  # on time again: p1 really sent nothing
        after_next = "p1" in coordinator.membership.live()
        return before, after_stall, after_next
    finally:
        await coordinator.stop()


def test_the_first_sweep_after_a_stall_expires_no_lease(tmp_path: Path) -> None:
    assert asyncio.run(_scenario(tmp_path)) == (True, True, False)
