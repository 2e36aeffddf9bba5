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
from coordinator.leader import EmbeddedLeader
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
