"""Leader election on a real ZooKeeper: one leader, succession, and the epoch fence that
refuses a deposed leader's publication even when its view of the pointer is current."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from coordinator.job_models import JobModelRepository
from coordinator.leadership.zookeeper import ZkLeader
from coordinator.store.zookeeper import ZkMetadataStore
from grouping.generation import generate_job_model
from grouping.groupers import GroupByPartition
from grouping.model import SSP, JobModel
from service.local.zookeeper import ZooKeeperEnsemble


def eventually(check: Callable[[], bool], timeout_s: float = 15) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


@pytest.fixture
def clients(zookeeper: ZooKeeperEnsemble) -> Iterator[Callable[[], KazooClient]]:
    made: list[KazooClient] = []

    def make() -> KazooClient:
        c = KazooClient(hosts=zookeeper.connect_string, timeout=2.0)
        c.start(15)
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()
        c.close()


def model(version: int) -> JobModel:
    ssps = [SSP("kafka", "in", p) for p in range(4)]
    return generate_job_model(version, ssps, GroupByPartition(), 1, {"w1": "a"}).job_model


def test_one_leader_then_the_next_with_a_higher_epoch(
    clients: Callable[[], KazooClient],
) -> None:
    root = f"/coxswain/{uuid.uuid4().hex[:8]}"
    changes: dict[str, list[bool]] = {"a": [], "b": []}
    leaders = {}
    for rid in ("a", "b"):
        client = clients()
        leaders[rid] = ZkLeader(client, ZkMetadataStore(client, root), f"{root}/leader/election",
                                rid, on_change=changes[rid].append)
    leaders["a"].start()
    eventually(leaders["a"].is_leader)
    leaders["b"].start()
    eventually(lambda: leaders["b"].leader_id() == "a")
    assert not leaders["b"].is_leader()
    first_epoch = leaders["a"].epoch
    leaders["a"].stop()
    eventually(leaders["b"].is_leader)
    assert leaders["b"].epoch > first_epoch
    assert leaders["b"].leader_id() == "b"
    assert changes["a"] == [True, False] and changes["b"] == [True]
    leaders["b"].stop()


def test_a_deposed_leader_cannot_publish_even_with_a_current_pointer(
    clients: Callable[[], KazooClient],
) -> None:
    root = f"/coxswain/{uuid.uuid4().hex[:8]}"
    ca, cb = clients(), clients()
    store_a, store_b = ZkMetadataStore(ca, root), ZkMetadataStore(cb, root)
    a = ZkLeader(ca, store_a, f"{root}/leader/election", "a")
    a.start()
    eventually(a.is_leader)
    repo_a = JobModelRepository(store_a)
    assert repo_a.publish(model(1), None, a.fence())
    pointer = repo_a.latest()
    assert pointer is not None
    stale_fence = a.fence()

    # a's session is expired behind its back (as for a process paused past the timeout)
    b = ZkLeader(cb, store_b, f"{root}/leader/election", "b")
    b.start()
    eventually(lambda: b.leader_id() == "a")
    a_node = a._node
    assert a_node is not None
    cb.delete(a_node)
    eventually(b.is_leader)
    assert b.epoch > (stale_fence.version if stale_fence else 0)
    # a still believes its pointer is current: only the epoch fence stops it
    assert not repo_a.publish(model(2), pointer[1], stale_fence)
    assert repo_a.latest() == pointer
    assert JobModelRepository(store_b).publish(model(2), pointer[1], b.fence())
    latest = repo_a.latest()
    assert latest is not None and latest[0] == 2
    a.stop()
    b.stop()
