"""Lease sweeps: a coordinator that was stalled reads the heartbeats of that time before it
expires any lease (the first sweep after the stall expires none, the next one, on time,
does); the sole replica of an embedded store sweeps its own cache, never reading the
store, and still expires a silent processor's lease."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coordinator.leadership.role import EmbeddedLeader
from coordinator.lifecycle import Coordinator, CoordinatorConfig
from coordinator.store.metadata import Versioned
from coordinator.store.sql import SqlMetadataStore
from grouping.model import SSP
from service.database import make_engine, upgrade
from tests.coordinator.fake_clock import FakeClock


class ListCountingStore(SqlMetadataStore):
    """The real SQL store, counting the namespace listings it serves (of keys, or of keys
    and values: a sweep that finds no lease due lists the keys only)."""

    listings = 0

    def keys(self, namespace: str) -> list[str]:
        self.listings += 1
        return super().keys(namespace)

    def list(self, namespace: str) -> dict[str, Versioned]:
        self.listings += 1
        return super().list(namespace)


async def _scenario(tmp_path: Path, sole_replica: bool) -> tuple[bool, bool, bool, int]:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    clock = FakeClock()
    config = CoordinatorConfig(inputs=(SSP("kafka", "orders", 0),), lease_ttl_s=10.0,
                               heartbeat_interval_s=2.0, debounce_s=0.05,
                               sole_replica=sole_replica)
    store = ListCountingStore(engine)
    coordinator = Coordinator(config, store, EmbeddedLeader("r1"), clock)
    await coordinator.start()
    try:
        await coordinator.register("p1", "h1", None)
        listed = store.listings
        await coordinator.liveness.sweep()  # on time: nothing has run out
        before = "p1" in coordinator.membership.live()
        clock.t += 30  # this process stalled for 30 s: p1's heartbeats are unread
        await coordinator.liveness.sweep()
        after_stall = "p1" in coordinator.membership.live()
        await coordinator.liveness.sweep()  # on time again: p1 really sent nothing
        after_next = "p1" in coordinator.membership.live()
        return before, after_stall, after_next, store.listings - listed
    finally:
        await coordinator.stop()


@pytest.mark.parametrize("sole_replica", [False, True])
def test_the_first_sweep_after_a_stall_expires_no_lease(tmp_path: Path,
                                                        sole_replica: bool) -> None:
    before, after_stall, after_next, _ = asyncio.run(_scenario(tmp_path, sole_replica))
    assert (before, after_stall, after_next) == (True, True, False)


def test_the_sole_replica_sweeps_without_reading_the_store(tmp_path: Path) -> None:
    assert asyncio.run(_scenario(tmp_path, True))[3] == 0
    assert asyncio.run(_scenario(tmp_path / "shared", False))[3] >= 3
