"""Lease renewals on the leader (the replica that expires leases): in memory between
write-throughs about half a TTL apart, never at the cost of a live processor's lease; every
other replica writes each renewal through."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from coordinator.errors import Fenced, UnknownProcessor
from coordinator.membership import NAMESPACE, Membership, ProcessorLease
from coordinator.store.metadata import Versioned
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
    """What the coordinator does for a heartbeat: in memory if it may (written behind
    when due), else written."""
    renewed = m.renew_cached(pid, token, lags, None)
    if renewed is None:
        return m.heartbeat(pid, token, lags, None)
    lease, due = renewed
    if due:
        assert m.write_behind(pid) is not None
    return lease


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


def test_a_snapshot_merged_later_leaves_alone_what_changed_after_it_was_taken(
    store: CountingStore,
) -> None:
    """Sweeps read the store without the coordinator's lock and merge under it: a
    registration, a removal or a renewal after the read must survive the merge."""
    clock = FakeClock()
    m = Membership(store, clock, TTL, renews_in_memory=LEADER)
    _, _, t1 = m.register("p1", "h1", None)
    m.register("p2", "h2", None)
    snapshot = m.snapshot()  # p1, p2 as stored now
    m.register("p3", "h3", None)  # after the read: not in the snapshot
    m.remove(["p2"])  # after the read: still in the snapshot
    clock.t += 4.0
    renewed = beat(m, "p1", t1, {"Partition 0": 7})  # in memory, after the read
    m.merge(*snapshot)
    assert sorted(m.live()) == ["p1", "p3"]
    assert m.live()["p1"] == renewed
    m.load()  # an up-to-date read changes nothing of it either
    assert sorted(m.live()) == ["p1", "p3"]
    assert m.live()["p1"].expires_at == clock.t + TTL


def test_a_snapshot_brings_in_what_other_replicas_wrote(store: CountingStore) -> None:
    clock = FakeClock()
    here = Membership(store, clock, TTL)
    there = Membership(store, clock, TTL)
    here.register("p1", "h1", None)
    there.register("p2", "h2", None)  # through another replica
    snapshot = here.snapshot()
    here.merge(*snapshot)
    assert sorted(here.live()) == ["p1", "p2"]
    there.remove(["p2"])
    here.merge(*here.snapshot())
    assert sorted(here.live()) == ["p1"]


class RacingStore(SqlMetadataStore):
    """The real SQL store, running ``between`` once right after a compare-and-set: what
    another thread does while a heartbeat's write is on its way back."""

    between: Callable[[], None] | None = None

    def compare_and_set(self, *args: object, **kwargs: object) -> int | None:
        written = super().compare_and_set(*args, **kwargs)  # type: ignore[arg-type]
        action, self.between = self.between, None
        if action is not None:
            action()
        return written


def test_a_heartbeat_written_as_the_leader_removes_the_lease_does_not_bring_it_back(
    tmp_path: Path,
) -> None:
    """Heartbeats are written without the coordinator's lock: a removal that lands
    between a write and its cache update wins, in the store and in the cache."""
    engine = make_engine(f"sqlite:///{tmp_path / 'racing.db'}")
    upgrade(engine)
    racing = RacingStore(engine)
    m = Membership(racing, FakeClock(), TTL)  # writes every heartbeat through
    _, _, token = m.register("p1", "h1", None)
    racing.between = lambda: m.remove(["p1"])
    with pytest.raises(UnknownProcessor):
        m.heartbeat("p1", token)
    assert "p1" not in m.live()
    assert racing.get(NAMESPACE, "p1") is None


def test_a_due_renewal_holds_in_memory_before_it_is_written_behind(
    store: CountingStore,
) -> None:
    """A slow store must not expire, in the leader's view, a processor whose heartbeats
    arrive: the renewal holds in memory at once, the write follows."""
    clock = FakeClock()
    m = Membership(store, clock, TTL, renews_in_memory=LEADER)
    _, _, token = m.register("p1", "h1", None)
    clock.t += TTL - 1.0  # the stored record runs out in a second
    renewed = m.renew_cached("p1", token)
    assert renewed is not None and renewed[1]  # due
    assert m.live()["p1"].expires_at == clock.t + TTL  # before anything is written
    assert stored_expiry(store, "p1") == 1_000.0 + TTL
    written = m.write_behind("p1")
    assert written is not None and stored_expiry(store, "p1") == clock.t + TTL


def test_a_write_behind_meets_a_newer_incarnation_and_leaves_it(store: CountingStore) -> None:
    clock = FakeClock()
    here = Membership(store, clock, TTL, renews_in_memory=LEADER)
    there = Membership(store, clock, TTL)
    _, _, old = here.register("p1", "h1", None)
    clock.t += TTL - 1.0
    renewed = here.renew_cached("p1", old)
    assert renewed is not None and renewed[1]
    _, _, new = there.register("p1", "h1", None)  # registered again through a follower
    assert here.write_behind("p1") is None
    assert here.renew_cached("p1", old) is None  # the cache holds the new incarnation
    assert here.renew_cached("p1", new) is not None


class BatchCountingStore(SqlMetadataStore):
    """The real SQL store, counting single and batched compare-and-sets."""

    singles = 0
    batches: list[int]

    def compare_and_set(self, *args: object, **kwargs: object) -> int | None:
        self.singles += 1
        return super().compare_and_set(*args, **kwargs)  # type: ignore[arg-type]

    def compare_and_set_many(self, namespace: str, writes: Mapping[str, tuple[bytes, int]],
                             ) -> dict[str, int | None]:
        self.batches.append(len(writes))
        return super().compare_and_set_many(namespace, writes)


@pytest.fixture
def batch_store(tmp_path: Path) -> BatchCountingStore:
    engine = make_engine(f"sqlite:///{tmp_path / 'batch.db'}")
    upgrade(engine)
    store = BatchCountingStore(engine)
    store.batches = []
    return store


def test_due_renewals_are_written_behind_in_one_batch(batch_store: BatchCountingStore) -> None:
    clock = FakeClock()
    m = Membership(batch_store, clock, TTL, renews_in_memory=LEADER)
    tokens = {pid: m.register(pid, f"h-{pid}", None)[2] for pid in ("p1", "p2", "p3")}
    clock.t += TTL - 1.0
    for pid, token in tokens.items():
        renewed = m.renew_cached(pid, token, {"Partition 0": 7})
        assert renewed is not None and renewed[1]
    singles = batch_store.singles
    assert m.write_behind_many(["p1", "p2", "p3"]) == 3
    assert batch_store.batches == [3] and batch_store.singles == singles
    for pid in tokens:
        assert stored_expiry(batch_store, pid) == clock.t + TTL
    # what was written is what the cache says is stored: the next write is due only
    # half a TTL on, and a sweep keeps the renewals
    clock.t += 2.0
    assert all(m.renew_cached(pid, t) == (m.live()[pid], False) for pid, t in tokens.items())
    m.load()
    assert m.task_lags() == {pid: {"Partition 0": 7} for pid in tokens}


def test_a_batched_write_behind_leaves_a_newer_incarnation_and_a_removal_alone(
    batch_store: BatchCountingStore,
) -> None:
    clock = FakeClock()
    here = Membership(batch_store, clock, TTL, renews_in_memory=LEADER)
    there = Membership(batch_store, clock, TTL)
    old = {pid: here.register(pid, "h1", None)[2] for pid in ("p1", "p2", "p3")}
    clock.t += TTL - 1.0
    for pid, token in old.items():
        assert here.renew_cached(pid, token) is not None
    _, _, new = there.register("p1", "h1", None)  # registered again through a follower
    there.remove(["p2"])  # and one left through it
    assert here.write_behind_many(["p1", "p2", "p3"]) == 1  # p3 alone is written
    assert batch_store.batches == [3]
    assert stored_expiry(batch_store, "p3") == clock.t + TTL
    assert batch_store.get(NAMESPACE, "p2") is None  # the removal stands
    stored = batch_store.get(NAMESPACE, "p1")
    assert stored is not None and ProcessorLease.from_bytes(stored.value).token_hash \
        == there.live()["p1"].token_hash  # the newer incarnation stands
    assert here.renew_cached("p1", old["p1"]) is None
    assert here.renew_cached("p1", new) is not None
    assert "p2" not in here.live()


class ReadCountingStore(CountingStore):
    """The real SQL store, counting the lease records read one by one and in bulk."""

    gets = 0
    lists = 0

    def get(self, namespace: str, key: str) -> Versioned | None:
        self.gets += 1
        return super().get(namespace, key)

    def list(self, namespace: str) -> dict[str, Versioned]:
        self.lists += 1
        return super().list(namespace)


def test_a_sweep_reads_only_the_leases_that_are_due(tmp_path: Path) -> None:
    """A sweep's snapshot with ``due_within_s`` reads only new records and those whose
    cached lease runs out within that time: leases renewed here in memory are not read;
    a renewal written by another replica is seen before the lease runs out here; records
    removed or added elsewhere go and come as with a full read."""
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    upgrade(engine)
    store = ReadCountingStore(engine)
    clock = FakeClock()
    here = Membership(store, clock, TTL, renews_in_memory=LEADER)
    there = Membership(store, clock, TTL)
    tokens = {pid: here.register(pid, f"h{i}", None)[2] for i, pid in
              enumerate(["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"])}
    there.load()
    other = tokens.pop("p7")  # p7 heartbeats through the other replica only
    for step in range(6):
        clock.t += 2.0
        for pid, token in tokens.items():
            beat(here, pid, token)
        there.heartbeat("p7", other, {"Partition 7": step}, None)
        store.gets = store.lists = 0
        here.merge(*here.snapshot(due_within_s=TTL / 2))
        assert store.lists == 0 and store.gets <= 1  # p7, once due, and nothing else
        assert sorted(here.live()) == [f"p{i}" for i in range(8)]
        assert here.expired() == []
    # here, p7's record was read again within half a TTL: its lags are that recent
    assert here.live()["p7"].task_lags["Partition 7"] >= 5 - (TTL / 2) // 2.0
    there.register("p8", "h8", None)  # elsewhere: a new record, read at once
    there.remove(["p0"])  # elsewhere: gone at once
    taken, stored, unread = here.snapshot(due_within_s=TTL / 2)
    assert "p8" in stored and "p0" not in stored and "p0" not in unread
    here.merge(taken, stored, unread)
    assert sorted(here.live()) == [f"p{i}" for i in range(1, 9)]
    # more than a quarter due (as after a handover to a replica that renewed nothing):
    # one bulk read
    clock.t += TTL * 0.6
    store.gets = store.lists = 0
    here.merge(*here.snapshot(due_within_s=TTL / 2))
    assert store.lists == 1 and store.gets == 0
