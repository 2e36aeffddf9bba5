"""One leader per shared SQL store without ZooKeeper: the leadership lease and epoch in the
store, on a real database (SQLite here; the service test runs it on PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.job_models import JobModelRepository
from coordinator.leadership.sql import LeadershipHeld, SqlLeaseLeader
from coordinator.store.sql import SqlMetadataStore
from grouping.model import JobModel
from service.database import make_engine, upgrade


class Clocks:
    """A wall clock and a monotonic clock that tests move by hand."""

    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.mono = 50.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


@pytest.fixture
def store(tmp_path: Path) -> SqlMetadataStore:
    engine = make_engine(f"sqlite:///{tmp_path / 'db' / 'store.db'}")
    upgrade(engine)
    return SqlMetadataStore(engine)


def leader(store: SqlMetadataStore, name: str, clocks: Clocks,
           lost: list[str] | None = None) -> SqlLeaseLeader:
    return SqlLeaseLeader(store, name, 10.0,
                          on_lost=lambda: (lost if lost is not None else []).append(name),
                          wall=lambda: clocks.wall, mono=lambda: clocks.mono)


def test_a_second_coordinator_is_refused_while_the_leader_renews(
    store: SqlMetadataStore,
) -> None:
    clocks = Clocks()
    a, b = leader(store, "a", clocks), leader(store, "b", clocks)
    a.acquire()
    assert a.is_leader() and a.epoch == 1
    with pytest.raises(LeadershipHeld, match="coordinator 'a' leads this store"):
        b.acquire(wait_s=0)
    clocks.advance(9)
    assert a.renew()
    clocks.advance(9)  # 18 s after it was taken, but renewed: still a's
    with pytest.raises(LeadershipHeld):
        b.acquire(wait_s=0)
    assert not b.is_leader()


def test_a_paused_leader_is_deposed_and_can_neither_publish_nor_judge_commits(
    store: SqlMetadataStore,
) -> None:
    clocks, lost = Clocks(), list[str]()
    a, b = leader(store, "a", clocks, lost), leader(store, "b", clocks, lost)
    a.acquire()
    models = JobModelRepository(store)
    assert models.publish(JobModel.of(1, {}, []), None, a.fence())
    clocks.advance(11)  # a is paused past its TTL: by its own clock it leads no more
    assert not a.is_leader() and not a.serves_commits()
    b.acquire(wait_s=0)
    assert b.is_leader() and b.epoch == 2
    pointer = models.latest()
    assert pointer is not None
    # a wakes up: its publication is refused in the same transaction (epoch fence)
    assert not models.publish(JobModel.of(2, {}, []), pointer[1], a.fence())
    assert models.publish(JobModel.of(2, {}, []), pointer[1], b.fence())
    assert not a.renew() and lost == ["a"]  # and it learns it lost the lease
    assert b.renew() and lost == ["a"]


def test_a_crashed_leaders_lease_is_waited_out_and_a_stopped_one_is_free_at_once(
    store: SqlMetadataStore,
) -> None:
    clocks = Clocks()
    a, b, c = (leader(store, n, clocks) for n in "abc")
    a.acquire()
    clocks.advance(10.5)  # a crashed: nobody renews
    b.acquire(wait_s=0)
    assert b.is_leader() and b.epoch == 2
    b.stop()  # a graceful stop gives the lease up
    c.acquire(wait_s=0)
    assert c.is_leader() and c.epoch == 3


def test_leadership_lapses_while_the_store_is_unreachable_and_resumes(
    store: SqlMetadataStore, tmp_path: Path,
) -> None:
    clocks, changes = Clocks(), list[bool]()
    a = leader(store, "a", clocks)
    a.set_on_change(changes.append)
    a.acquire()
    store.close()
    (tmp_path / "db").rename(tmp_path / "away")  # the database is unreachable a while
    clocks.advance(11)
    assert a.renew()  # not lost: nobody could have taken it
    assert not a.is_leader() and changes == [False]
    (tmp_path / "away").rename(tmp_path / "db")
    assert a.renew()
    assert a.is_leader() and changes == [False, True]
