"""The leader writes due lease renewals behind in batches: heartbeats that come due
together are one batch of compare-and-sets (one ZooKeeper transaction), each heartbeat is
answered from memory at once, and a coordinator that stops writes what was still due."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from coordinator.leadership.role import EmbeddedLeader
from coordinator.lifecycle import Coordinator, CoordinatorConfig
from coordinator.membership import NAMESPACE, ProcessorLease
from coordinator.store.sql import SqlMetadataStore
from grouping.model import SSP
from service.database import make_engine, upgrade
from tests.coordinator.fake_clock import FakeClock

TTL = 10.0


class BatchCountingStore(SqlMetadataStore):
    """The real SQL store, recording its lease writes: single and batched."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.singles: list[str] = []
        self.batches: list[list[str]] = []

    def compare_and_set(self, namespace: str, key: str, *args: object,
                        **kwargs: object) -> int | None:
        if namespace == NAMESPACE:
            self.singles.append(key)
        return super().compare_and_set(namespace, key, *args, **kwargs)  # type: ignore[arg-type]

    def compare_and_set_many(self, namespace: str, writes: Mapping[str, tuple[bytes, int]],
                             ) -> dict[str, int | None]:
        self.batches.append(sorted(writes))
        return super().compare_and_set_many(namespace, writes)


def stored_expiry(store: SqlMetadataStore, pid: str) -> float:
    found = store.get(NAMESPACE, pid)
    assert found is not None
    return ProcessorLease.from_bytes(found.value).expires_at


async def _scenario(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    clock = FakeClock()
    config = CoordinatorConfig(inputs=(SSP("kafka", "orders", 0),), lease_ttl_s=TTL,
                               heartbeat_interval_s=2.0, debounce_s=0.05)
    store = BatchCountingStore(engine)
    coordinator = Coordinator(config, store, EmbeddedLeader("r1"), clock)
    await coordinator.start()
    pids = [f"p{i}" for i in range(5)]
    try:
        tokens = {pid: (await coordinator.register(pid, f"h{pid}", None))[2] for pid in pids}
        registered = {pid: stored_expiry(store, pid) for pid in pids}
        clock.t += TTL - 1.0  # every stored record runs out in a second: all due
        for pid in pids:
            lease = await coordinator.heartbeat(pid, tokens[pid], None, None)
            assert lease.expires_at == clock.t + TTL  # answered from memory at once
        # nothing written yet: the batch lingers for what else comes due
        assert {pid: stored_expiry(store, pid) for pid in pids} == registered
        await asyncio.wait_for(_written(store, pids, clock.t + TTL), timeout=10)
        assert store.batches == [pids] and store.singles == []
        # due again later, and the coordinator stops before the linger ends: written
        clock.t += TTL - 1.0
        for pid in pids[:2]:
            await coordinator.heartbeat(pid, tokens[pid], None, None)
    finally:
        await coordinator.stop()
    assert store.batches == [pids, pids[:2]]
    assert [stored_expiry(store, pid) == clock.t + TTL for pid in pids] == [
        True, True, False, False, False]


async def _written(store: SqlMetadataStore, pids: list[str], expiry: float) -> None:
    while any(stored_expiry(store, pid) != expiry for pid in pids):
        await asyncio.sleep(0.02)


def test_due_renewals_are_written_behind_together_and_on_stop(tmp_path: Path) -> None:
    asyncio.run(_scenario(tmp_path))
