"""Parked long polls wake when what they wait for changes, not on every ack."""

from __future__ import annotations

import asyncio
from pathlib import Path

from coordinator.barrier import BarrierState
from coordinator.clock import SystemClock
from coordinator.leadership.role import EmbeddedLeader
from coordinator.lifecycle import Coordinator, CoordinatorConfig
from coordinator.store.sql import SqlMetadataStore
from grouping.model import SSP
from service.database import make_engine, upgrade
from tests.coordinator.rebalanced import rebalanced


async def _scenario(tmp_path: Path) -> tuple[int, int, list[bool]]:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    # the joins' own (debounced) rebalance must not race the explicit one below: with a
    # short debounce it published the same assignment first on a slow run, and the
    # explicit one found nothing changed
    config = CoordinatorConfig(inputs=tuple(SSP("kafka", "orders", p) for p in range(8)),
                               debounce_s=60, barrier_timeout_s=30)
    coordinator = Coordinator(config, SqlMetadataStore(engine), EmbeddedLeader("r1"),
                              SystemClock())
    await coordinator.start()
    try:
        pids = [f"p{i}" for i in range(6)]
        for pid in pids:
            await coordinator.register(pid, f"h-{pid}", None)
        model = await rebalanced(coordinator)
        assert set(model.containers) == set(pids)
        version = model.version
        wakeups = 0
        versions = coordinator._versions
        original = versions._changed_since

        def counted(since: int | None, barrier: BarrierState | None) -> bool:
            nonlocal wakeups
            wakeups += 1
            return original(since, barrier)

        versions._changed_since = counted  # type: ignore[method-assign]
        # ten processors' polls for the next version, and one for the barrier's end
        polls = [asyncio.create_task(coordinator.wait_for_change(version, None, 5.0))
                 for _ in range(10)]
        barrier_poll = asyncio.create_task(
            coordinator.wait_for_change(version, BarrierState.PENDING, 5.0))
        await asyncio.sleep(0.05)
        parked = wakeups
        for pid in pids[:-1]:
            await coordinator.ack(version, pid)
            await asyncio.sleep(0)
        after_acks = wakeups - parked
        await coordinator.ack(version, pids[-1])  # the barrier is done: its poll answers
        done = await asyncio.wait_for(barrier_poll, 5.0)
        for poll in polls:
            poll.cancel()
        return parked, after_acks, [done]
    finally:
        await coordinator.stop()


def test_acks_that_leave_the_barrier_pending_wake_no_long_poll(tmp_path: Path) -> None:
    parked, after_acks, done = asyncio.run(_scenario(tmp_path))
    assert parked == 11  # each poll checked once before parking
    assert after_acks == 0  # five acks, nothing any poll waits for changed
    assert done == [True]
