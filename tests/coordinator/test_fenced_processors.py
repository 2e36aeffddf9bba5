"""The processors a version's participants fence before acking it (exactly-once output):
those of the active or latest version that the new one no longer has; a completed
barrier empties the list without a version of its own."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from coordinator.barrier import BarrierState
from coordinator.fenced import FENCED, fenced_processors, without_fenced
from coordinator.leadership.role import EmbeddedLeader
from coordinator.lifecycle import Coordinator, CoordinatorConfig
from coordinator.store.sql import SqlMetadataStore
from grouping.model import SSP, ContainerModel, JobModel
from service.database import make_engine, upgrade
from tests.coordinator.fake_clock import FakeClock
from tests.coordinator.rebalanced import rebalanced


def model(version: int, processors: set[str]) -> JobModel:
    return JobModel.of(version, {}, [ContainerModel(p, "h", {}) for p in processors])


ids = st.sets(st.sampled_from(["a", "b", "c", "d", "e"]))


@given(ids, ids, ids)
def test_listed_are_exactly_the_ones_held_and_gone(active: set[str], latest: set[str],
                                                   now: set[str]) -> None:
    fenced = fenced_processors(model(1, active), model(2, latest), now)
    assert fenced == sorted(fenced)
    assert set(fenced) == (active | latest) - now
    assert fenced_processors(None, None, now) == []


def test_the_list_is_not_a_change_of_its_own() -> None:
    assert without_fenced({"a": 1, FENCED: ["p"]}) == without_fenced({"a": 1}) == {"a": 1}


async def _scenario(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    config = CoordinatorConfig(inputs=(SSP("kafka", "orders", 0), SSP("kafka", "orders", 1)),
                               debounce_s=0.05)
    coordinator = Coordinator(config, SqlMetadataStore(engine), EmbeddedLeader("r1"),
                              FakeClock())
    await coordinator.start()
    try:
        for pid in ("p1", "p2"):
            await coordinator.register(pid, f"h-{pid}", None)
        v1 = await rebalanced(coordinator)
        assert FENCED not in v1.config  # nothing ran before
        for pid in ("p1", "p2"):
            await coordinator.ack(v1.version, pid)
        assert coordinator.active is not None and coordinator.active.version == v1.version
        assert await coordinator.leave("p2")
        v2 = await rebalanced(coordinator)
        assert v2.config[FENCED] == ["p2"]  # it ran under v1: fenced before v2 is done
        assert await coordinator.ack(v2.version, "p1") is BarrierState.DONE
        # done: p2 was fenced; the empty list alone makes no version
        assert await coordinator.rebalance("nothing changed") is None
        await coordinator.register("p3", "h-p3", None)
        v3 = await rebalanced(coordinator)
        assert FENCED not in v3.config
    finally:
        await coordinator.stop()


def test_a_processor_gone_is_listed_until_a_barrier_completes(tmp_path: Path) -> None:
    asyncio.run(_scenario(tmp_path))


def test_a_version_without_processors_hands_its_list_on() -> None:
    """Every lease expired: the version that removed them has no participant to fence
    them, so the next version's participants do (before anyone runs their tasks)."""
    empty = JobModel.of(5, {FENCED: ["w1", "w2"]}, [])
    assert fenced_processors(empty, empty, ["w0"]) == ["w1", "w2"]
    assert fenced_processors(empty, model(6, {"w0"}), ["w0"]) == ["w1", "w2"]
    assert fenced_processors(empty, empty, ["w1", "w0"]) == ["w2"]  # registered again
    held = JobModel.of(5, {FENCED: ["w1"]}, [ContainerModel("w0", "h", {})])
    assert fenced_processors(held, held, ["w0"]) == []  # w0 fenced it, acking v5


async def _all_gone(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    config = CoordinatorConfig(inputs=(SSP("kafka", "orders", 0),), debounce_s=0.05)
    coordinator = Coordinator(config, SqlMetadataStore(engine), EmbeddedLeader("r1"),
                              FakeClock())
    await coordinator.start()
    try:
        await coordinator.register("w1", "h-w1", None)
        v1 = await rebalanced(coordinator)
        await coordinator.ack(v1.version, "w1")
        assert await coordinator.leave("w1")  # (as its lease expiring would)
        v2 = await rebalanced(coordinator)
        assert v2.config[FENCED] == ["w1"] and not v2.containers  # done by no one
        assert coordinator.active is not None and coordinator.active.version == v2.version
        await coordinator.register("w0", "h-w0", None)
        v3 = await rebalanced(coordinator)
        assert v3.config[FENCED] == ["w1"]  # w0 fences w1 before it runs w1's tasks
        assert await coordinator.ack(v3.version, "w0") is BarrierState.DONE
        await coordinator.register("w2", "h-w2", None)
        v4 = await rebalanced(coordinator)
        assert FENCED not in v4.config  # fenced by w0 under v3
    finally:
        await coordinator.stop()


def test_a_processor_removed_by_a_version_without_processors_is_fenced_by_the_next(
    tmp_path: Path,
) -> None:
    asyncio.run(_all_gone(tmp_path))


async def _all_timed_out(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    config = CoordinatorConfig(inputs=(SSP("kafka", "orders", 0), SSP("kafka", "orders", 1)),
                               debounce_s=0.05)
    clock = FakeClock()
    coordinator = Coordinator(config, SqlMetadataStore(engine), EmbeddedLeader("r1"), clock)
    await coordinator.start()
    try:
        for pid in ("p1", "p2", "p3"):
            await coordinator.register(pid, f"h-{pid}", None)
        v1 = await rebalanced(coordinator)
        for pid in ("p1", "p2", "p3"):
            await coordinator.ack(v1.version, pid)
        assert await coordinator.leave("p3")
        v2 = await rebalanced(coordinator)
        assert v2.config[FENCED] == ["p3"]
        # neither participant acks (so neither fenced p3): the barrier times out
        clock.t += config.barrier_timeout_s + 1
        await coordinator._keeper.timeout(v2.version)
        v3 = await rebalanced(coordinator)
        # a timed-out barrier makes no version active (the next is built from v1, which
        # still has p3); both dropped, v3 has no processors: done by no one, it hands
        # its list on
        assert v3.config[FENCED] == ["p1", "p2", "p3"] and not v3.containers
        for pid in ("p1", "p2"):  # heard of again (their leases had expired meanwhile)
            await coordinator.register(pid, f"h-{pid}", None)
        v4 = await rebalanced(coordinator)
        assert v4.config[FENCED] == ["p3"], v4.config  # nobody fenced it yet
        for pid in ("p1", "p2"):
            await coordinator.ack(v4.version, pid)
        assert coordinator.active is not None and coordinator.active.version == v4.version
        await coordinator.register("p5", "h-p5", None)
        v5 = await rebalanced(coordinator)
        assert FENCED not in v5.config  # fenced by v4's participants, who acked it
    finally:
        await coordinator.stop()


def test_a_barrier_every_participant_timed_out_at_leaves_its_list_to_the_next(
    tmp_path: Path,
) -> None:
    """Nobody acked the version that removed p3 (so nobody fenced it): the next
    version is built from the newest *completed* one, which still has p3, and a
    version without processors hands its list on, until a barrier whose participants
    fenced p3 completes."""
    asyncio.run(_all_timed_out(tmp_path))
