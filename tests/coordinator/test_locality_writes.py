"""Task localities are written in the background: a slow write holds neither heartbeats nor
registrations, and the ack that completes a barrier answers once they are stored."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from coordinator.barrier import NAMESPACE as BARRIERS
from coordinator.barrier import BarrierState
from coordinator.clock import SystemClock
from coordinator.job_models import VERSIONS
from coordinator.leadership.role import EmbeddedLeader
from coordinator.lifecycle import Coordinator, CoordinatorConfig
from coordinator.locality import (
    TASK_HOSTS,
    TASK_LOCALITY,
    LocalityWriter,
    TaskLocality,
    reported_locations,
)
from coordinator.store.metadata import Fence
from coordinator.store.sql import SqlMetadataStore
from grouping.model import SSP
from service.database import make_engine, upgrade
from tests.coordinator.rebalanced import rebalanced


class SlowLocalityStore(SqlMetadataStore):
    """The real SQL store, whose task locality writes wait for ``release`` (a 200k-task
    write to ZooKeeper takes seconds); every other write goes through at once."""

    release = threading.Event()
    fail_next = False

    def put_many(self, namespace: str, values: Mapping[str, bytes]) -> None:
        if namespace == TASK_LOCALITY:
            assert self.release.wait(30)
            if self.fail_next:
                self.fail_next = False
                raise OSError("store gone for a moment")
        super().put_many(namespace, values)


def _engine(tmp_path: Path) -> Engine:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    return engine


def store(tmp_path: Path) -> SlowLocalityStore:
    slow = SlowLocalityStore(_engine(tmp_path))
    slow.release = threading.Event()
    return slow


def _coordinator(store: SqlMetadataStore, partitions: int) -> Coordinator:
    """The leader of a job over ``partitions`` partitions that rebalances only when told."""
    config = CoordinatorConfig(inputs=tuple(SSP("kafka", "orders", p)
                                            for p in range(partitions)),
                               debounce_s=60, barrier_timeout_s=60)
    return Coordinator(config, store, EmbeddedLeader("r1"), SystemClock())


async def _barrier_scenario(tmp_path: Path) -> tuple[bool, dict[str, str]]:
    slow = store(tmp_path)
    coordinator = _coordinator(slow, 4)
    await coordinator.start()
    try:
        await coordinator.register("p1", "h1", None)
        model = await rebalanced(coordinator)
        ack = asyncio.create_task(coordinator.ack(model.version, "p1"))
        await asyncio.sleep(0.3)  # the barrier is done; its localities are being written
        assert coordinator.barrier is not None
        assert coordinator.barrier.state is BarrierState.DONE
        # not held by the write: it returns while the write is held (until released,
        # for 30 s), whatever the machine's load
        await asyncio.wait_for(coordinator.register("p2", "h2", None), 15)
        answered_early = ack.done()
        slow.release.set()
        state = await asyncio.wait_for(ack, 10)
        assert state is BarrierState.DONE
        return answered_early, TaskLocality(slow).read()
    finally:
        slow.release.set()
        await coordinator.stop()


def test_a_slow_locality_write_holds_nothing_but_the_completing_ack(tmp_path: Path) -> None:
    answered_early, stored = asyncio.run(_barrier_scenario(tmp_path))
    assert not answered_early  # its answer waited for the localities...
    assert stored == {f"Partition {p}": "h1" for p in range(4)}  # ...which are stored


async def _writer_scenario(tmp_path: Path) -> dict[str, str]:
    slow = store(tmp_path)
    writer = LocalityWriter(TaskLocality(slow))
    slow.fail_next = True
    writer.write({"a": "h1", "b": "h1"}, {})  # fails: logged, the next ones go on
    writer.write({"b": "h2"}, {})
    writer.write({"c": "h3", "b": "h2"}, {"b": "h2"})  # in order: b stays h2
    slow.release.set()
    await asyncio.wait_for(writer.flush(), 10)
    return TaskLocality(slow).read()


def test_writes_run_in_order_and_a_failed_one_stops_none_after_it(tmp_path: Path) -> None:
    assert asyncio.run(_writer_scenario(tmp_path)) == {"b": "h2", "c": "h3"}


async def _reported_hosts_scenario(tmp_path: Path) -> tuple[dict[str, str], dict[str, Any]]:
    slow = store(tmp_path)
    slow.release.set()
    coordinator = _coordinator(slow, 4)
    await coordinator.start()
    try:
        _, _, token = await coordinator.register("app", "driver-host", None)
        model = await rebalanced(coordinator)
        hosts = {"Partition 0": "host-x", "Partition 1": "host-x", "Partition 2": "host-y",
                 # ignored: a task of another processor, a value that is no host name
                 "Partition 9": "host-z", "Partition 3": 7}
        await coordinator.heartbeat("app", token, None, {TASK_HOSTS: hosts})
        assert await coordinator.ack(model.version, "app") is BarrierState.DONE
        stored = TaskLocality(slow).read()
        # the app leaves; one processor at each host comes (in one version)
        await coordinator.leave("app")
        await coordinator.register("x0", "host-x", None)
        await coordinator.register("y0", "host-y", None)
        after = await rebalanced(coordinator)
        return stored, {pid: sorted(t.name for t in c.active_tasks)
                        for pid, c in after.containers.items()}
    finally:
        await coordinator.stop()


def test_the_hosts_a_worker_reports_are_its_tasks_localities(tmp_path: Path) -> None:
    """A worker on a Spark cluster whose executors keep its tasks' state on several
    hosts reports each task's host (the heartbeat stat ``taskHosts``): the barrier
    records those as the tasks' localities, so once it leaves each task goes to the
    processor at its state's host."""
    stored, owners = asyncio.run(_reported_hosts_scenario(tmp_path))
    assert stored == {"Partition 0": "host-x", "Partition 1": "host-x",
                      "Partition 2": "host-y", "Partition 3": "driver-host"}
    # (by load and name alone x0 would get partitions 0 and 2)
    assert owners["x0"] == ["Partition 0", "Partition 1"]
    assert "Partition 2" in owners["y0"]


def test_reported_locations_keep_owned_tasks_with_host_names_only() -> None:
    stats: dict[str, dict[str, Any]] = {
        "a": {TASK_HOSTS: {"t1": "h1", "t2": "", "t3": "h" * 256, "t4": None, "t9": "h9"}},
        "b": {TASK_HOSTS: ["not", "a", "mapping"]}, "c": {}}
    owners = {"a": ["t1", "t2", "t3", "t4"], "b": ["t5"], "c": ["t6"], "d": ["t7"]}
    assert reported_locations(owners, stats) == {"t1": "h1"}


class GatedStore(SqlMetadataStore):
    """The real SQL store whose barrier writes and active-version writes each wait, once
    stored, for a gate the test opens: the moments between them are where a replica's
    refresh and the completing ack interleave."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.barrier_written = threading.Event()
        self.barrier_gate = threading.Event()
        self.active_written = threading.Event()
        self.active_gate = threading.Event()
        self.gated = False

    def compare_and_set(self, namespace: str, key: str, value: bytes,
                        expected_version: int | None, fence: Fence | None = None
                        ) -> int | None:
        stored = super().compare_and_set(namespace, key, value, expected_version, fence)
        if self.gated and namespace == BARRIERS:
            self.barrier_written.set()
            assert self.barrier_gate.wait(30)
        return stored

    def put(self, namespace: str, key: str, value: bytes) -> int:
        stored = super().put(namespace, key, value)
        if self.gated and namespace == VERSIONS and key == "active":
            self.active_written.set()
            assert self.active_gate.wait(30)
        return stored


async def _refresh_completes_first(tmp_path: Path) -> tuple[bool, dict[str, str]]:
    gated = GatedStore(_engine(tmp_path))
    coordinator = _coordinator(gated, 2)
    await coordinator.start()
    try:
        await coordinator.register("p1", "h1", None)
        model = await rebalanced(coordinator)
        gated.gated = True
        ack = asyncio.create_task(coordinator.ack(model.version, "p1"))
        # the ack's write stored the barrier done; before the ack goes on, a refresh (the
        # store's change notice) reads it and records the version, slowly
        assert await asyncio.to_thread(gated.barrier_written.wait, 30)
        refresh = asyncio.create_task(coordinator._refresh())
        assert await asyncio.to_thread(gated.active_written.wait, 30)
        gated.barrier_gate.set()
        await asyncio.sleep(0.3)
        answered_early = ack.done()
        gated.active_gate.set()
        assert await asyncio.wait_for(ack, 10) is BarrierState.DONE
        await asyncio.wait_for(refresh, 10)
        return answered_early, TaskLocality(gated).read()
    finally:
        gated.barrier_gate.set()
        gated.active_gate.set()
        await coordinator.stop()


def test_the_completing_ack_waits_for_localities_a_refresh_is_recording(
        tmp_path: Path) -> None:
    """The barrier's completion may be recorded by a refresh rather than by the ack that
    completed it (the store notices the barrier write first): that ack still answers only
    once the localities are stored, never before the refresh has queued them."""
    answered_early, stored = asyncio.run(_refresh_completes_first(tmp_path))
    assert not answered_early
    assert stored == {"Partition 0": "h1", "Partition 1": "h1"}
