"""A barrier waits past its timeout for a processor that heartbeats and reports handing
over (the stat ``handingOver``), up to its maximum; a processor that reports nothing, or
keeps the barrier past its maximum, is dropped at the timeout as before."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator.barrier import Barrier, BarrierRepository, BarrierState
from coordinator.clock import SystemClock
from coordinator.errors import UnknownProcessor
from coordinator.leadership.role import EmbeddedLeader
from coordinator.lifecycle import Coordinator, CoordinatorConfig
from coordinator.lifecycle.handing_over import HANDING_OVER, handing_over
from coordinator.membership import ProcessorLease
from coordinator.store.sql import SqlMetadataStore
from grouping.model import SSP
from service.database import make_engine, upgrade
from tests.coordinator.rebalanced import rebalanced

TIMEOUT_S, MAX_S, BEAT_S = 0.6, 4.0, 0.1
# the leader counts a heartbeat as recent within 3 intervals: 3 s, though the test beats
# every 0.1 s (a loaded machine may hold its loop up for a while)
INTERVAL_S = 1.0


def _lease(pid: str, expires_at: float, stats: dict[str, Any]) -> ProcessorLease:
    return ProcessorLease(pid, "h", None, 0.0, expires_at, stats=stats)


def test_only_silent_participants_that_heartbeat_and_report_this_version_count() -> None:
    barrier = Barrier(5, BarrierState.PENDING, frozenset({"a", "b", "c", "d", "e"}),
                      frozenset({"a"}), 0.0)
    now, ttl = 100.0, 10.0
    leases = {
        "a": _lease("a", 110.0, {HANDING_OVER: {"version": 5}}),  # acked already
        "b": _lease("b", 109.5, {HANDING_OVER: {"version": 5, "tasks": 2}}),  # yes
        "c": _lease("c", 100.5, {HANDING_OVER: {"version": 5}}),  # last beat 9.5 s ago
        "d": _lease("d", 110.0, {HANDING_OVER: {"version": 4}}),  # an older version's
        "e": _lease("e", 110.0, {}),  # reports nothing
    }
    assert handing_over(barrier, leases, now, ttl, 1.0) == {"b": {"version": 5, "tasks": 2}}
    leases["d"] = _lease("d", 110.0, {HANDING_OVER: {"version": True}})  # not a version
    assert set(handing_over(barrier, leases, now, ttl, 1.0)) == {"b"}


async def _scenario(tmp_path: Path, report: bool, ack_after_s: float | None
                    ) -> tuple[BarrierState, bool, float]:
    """p2 does not ack version 2 while it heartbeats (reporting handing over or not);
    returns the barrier's state, whether p2 is still a member, and when it ended."""
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    config = CoordinatorConfig(inputs=tuple(SSP("kafka", "orders", p) for p in range(4)),
                               debounce_s=60, barrier_timeout_s=TIMEOUT_S, barrier_max_s=MAX_S,
                               heartbeat_interval_s=INTERVAL_S, lease_ttl_s=30)
    store = SqlMetadataStore(engine)
    coordinator = Coordinator(config, store, EmbeddedLeader("r1"), SystemClock())
    await coordinator.start()
    try:
        _, _, t1 = await coordinator.register("p1", "h1", None)
        first = await rebalanced(coordinator)
        assert await coordinator.ack(first.version, "p1") is BarrierState.DONE
        _, _, t2 = await coordinator.register("p2", "h2", None)
        model = await rebalanced(coordinator)
        assert sorted(model.containers) == ["p1", "p2"]
        await coordinator.ack(model.version, "p1")
        started = time.monotonic()
        stats = {HANDING_OVER: {"version": model.version, "tasks": 1}} if report else {}

        async def beat() -> None:
            while True:
                await coordinator.heartbeat("p1", t1, None, {})
                try:
                    await coordinator.heartbeat("p2", t2, None, stats)
                except UnknownProcessor:  # dropped: a worker would register again
                    return
                await asyncio.sleep(BEAT_S)

        beats = asyncio.create_task(beat())
        try:
            while True:
                barrier = coordinator.barrier
                assert barrier is not None
                if barrier.version != model.version or barrier.state is not BarrierState.PENDING:
                    break
                if ack_after_s is not None and time.monotonic() - started >= ack_after_s:
                    await coordinator.ack(model.version, "p2")
                    continue
                assert time.monotonic() - started < MAX_S + 30, barrier
                await asyncio.sleep(0.05)
            ended = time.monotonic() - started
            stored = BarrierRepository(store).load(model.version)  # (a timeout regenerates)
            assert stored is not None
            if stored.state is BarrierState.TIMED_OUT:  # its silent processors are dropped
                deadline = time.monotonic() + 30  # right after the barrier is stored
                while "p2" in coordinator.membership.live() and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
            if stored.ended_at is not None:  # the barrier's own span, by its clock
                ended = stored.ended_at - stored.started_at
            return stored.state, "p2" in coordinator.membership.live(), ended
        finally:
            beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beats
    finally:
        await coordinator.stop()


def test_a_processor_handing_over_is_waited_for_past_the_timeout(tmp_path: Path) -> None:
    state, member, ended = asyncio.run(_scenario(tmp_path, True, ack_after_s=3 * TIMEOUT_S))
    assert state is BarrierState.DONE and member
    assert ended >= 3 * TIMEOUT_S


@pytest.mark.parametrize("report", [False, True])
def test_a_silent_processor_or_one_past_the_maximum_is_dropped(tmp_path: Path,
                                                                report: bool) -> None:
    state, member, ended = asyncio.run(_scenario(tmp_path, report, ack_after_s=None))
    assert state is BarrierState.TIMED_OUT and not member
    if report:  # waited for up to the maximum, not longer than a timeout past it
        assert ended >= MAX_S
    else:
        assert ended < MAX_S
