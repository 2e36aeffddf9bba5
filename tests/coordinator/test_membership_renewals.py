"""Lease renewals on the leader (the replica that expires leases): in memory between
write-throughs about half a TTL apart, never at the cost of a live processor's lease; every
other replica writes each renewal through."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.errors import Fenced, UnknownProcessor
from coordinator.membership import NAMESPACE, Membership, ProcessorLease
from coordinator.store.sql import SqlMetadataStore
from service.database import make_engine, upgrade
from tests.coordinator.fake_clock import FakeClock

TTL = 9.0
LEADER = lambda: True  # noqa: E731  (a replica that holds leadership throughout)


class CountingStore(SqlMetadataStore):
    """The real SQL store, counting the lease writes it takes."""

    writes = 0

    def compare_and_set(self, *args: object, **kwargs: object) -> int | None:
        self.writes += 1
        return super().compare_and_set(*args, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> CountingStore:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    return CountingStore(engine)


def stored_expiry(store: SqlMetadataStore, pid: str) -> float:
    found = store.get(NAMESPACE, pid)
    assert found is not None
    return ProcessorLease.from_bytes(found.value).expires_at


def beat(m: Membership, pid: str, token: str, lags: dict[str, int] | None = None
         ) -> ProcessorLease:
    """What the coordinator does for a heartbeat: in memory if it may, else written."""
    return m.renew_cached(pid, token, lags, None) or m.heartbeat(pid, token, lags, None)


def test_renewals_are_written_half_a_ttl_apart_and_the_store_stays_ahead(
    store: CountingStore,
) -> None:
    clock = FakeClock()
    m = Membership(store, clock, TTL, renews_in_memory=LEADER)
    _, _, token = m.register("p1", "h1", None)
    for _ in range(30):  # a heartbeat every 2 s for a minute
        clock.t += 2.0
        lease = beat(m, "p1", token, {"Partition 0": int(clock.t)})
        assert lease.expires_at == clock.t + TTL
        # what the store says is never less than 2/3 TTL - one interval ahead of now
        assert stored_expiry(store, "p1") - clock.t >= TTL / 2 - 2.0
        m.load()  # a sweep: the fresher renewal in memory survives it
        assert m.live()["p1"].expires_at == clock.t + TTL
        assert m.task_lags()["p1"] == {"Partition 0": int(clock.t)}
        assert m.expired() == []
    assert store.writes <= 30 / 2  # at most every other heartbeat written (TTL 9 s)


def test_a_follower_writes_every_renewal_through_for_the_leader(store: CountingStore) -> None:
    clock = FakeClock()
    m = Membership(store, clock, TTL)  # not the leader: the default
    _, _, token = m.register("p1", "h1", None)
    for _ in range(5):
        clock.t += 2.0
        assert m.renew_cached("p1", token) is None
        m.heartbeat("p1", token)
        assert stored_expiry(store, "p1") == clock.t + TTL
    assert store.writes == 5  # one compare-and-set each, without reading first


def test_a_dead_processor_still_expires_within_a_ttl(store: CountingStore) -> None:
    clock = FakeClock()
    m = Membership(store, clock, TTL, renews_in_memory=LEADER)
    _, _, token = m.register("p1", "h1", None)
    for _ in range(3):
        clock.t += 2.0
        beat(m, "p1", token)
    last = clock.t
    clock.t = last + TTL - 0.1
    m.load()
    assert m.expired() == []
    clock.t = last + TTL
    m.load()
    assert m.expired() == ["p1"]


def test_removed_or_registered_again_goes_to_the_store(store: CountingStore) -> None:
    clock = FakeClock()
    m = Membership(store, clock, TTL, renews_in_memory=LEADER)
    _, _, old = m.register("p1", "h1", None)
    _, _, new = m.register("p1", "h1", None)  # a new incarnation fences the old token
    clock.t += 1
    assert m.renew_cached("p1", old) is None
    with pytest.raises(Fenced):
        m.heartbeat("p1", old)
    assert beat(m, "p1", new).expires_at == clock.t + TTL
    m.remove(["p1"])
    assert m.renew_cached("p1", new) is None
    with pytest.raises(UnknownProcessor):
        m.heartbeat("p1", new)


def test_a_record_changed_by_another_replica_is_read_before_it_is_renewed(
    store: CountingStore,
) -> None:
    clock = FakeClock()
    here = Membership(store, clock, TTL)
    there = Membership(store, clock, TTL)
    _, _, token = here.register("p1", "h1", None)
    clock.t += 2
    there.heartbeat("p1", token, {"Partition 0": 5})  # through the other replica
    clock.t += 2
    lease = here.heartbeat("p1", token)  # its cached version is stale: read, then written
    assert lease.task_lags == {"Partition 0": 5}
    assert stored_expiry(store, "p1") == clock.t + TTL


def test_reading_the_record_keeps_a_fresher_renewal_in_memory(store: CountingStore) -> None:
    clock = FakeClock()
    m = Membership(store, clock, TTL, renews_in_memory=LEADER)
    _, _, token = m.register("p1", "h1", None)
    clock.t += 1
    assert m.renew_cached("p1", token, {"Partition 0": 3}) is not None
    with pytest.raises(Fenced):  # a refused heartbeat reads the (older) record
        m.heartbeat("p1", "another-token")
    lease = m.reload("p1")
    assert lease is not None and lease.task_lags == {"Partition 0": 3}
    assert lease.expires_at == clock.t + TTL


def test_a_leader_that_lost_leadership_writes_through_again(store: CountingStore) -> None:
    clock = FakeClock()
    leading = [True]
    m = Membership(store, clock, TTL, renews_in_memory=lambda: leading[0])
    _, _, token = m.register("p1", "h1", None)
    clock.t += 2.0
    assert beat(m, "p1", token) is not None and store.writes == 0  # in memory
    leading[0] = False  # deposed: the new leader reads this replica's heartbeats stored
    clock.t += 2.0
    assert m.renew_cached("p1", token) is None
    m.heartbeat("p1", token, {"Partition 0": 1})
    assert stored_expiry(store, "p1") == clock.t + TTL
    assert store.writes == 1
