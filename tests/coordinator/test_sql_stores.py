"""The SQL metadata store, job model repository and migrations, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, inspect

from coordinator.job_models import JobModelRepository
from coordinator.store.sql import SqlMetadataStore
from grouping.generation import generate_job_model
from grouping.groupers import GroupByPartition
from grouping.model import SSP
from service.database import current_revision, downgrade, make_engine, upgrade


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    engine = make_engine(store_url)
    upgrade(engine)
    yield engine
    engine.dispose()


def test_put_get_list_delete_with_versions(engine: Engine) -> None:
    store = SqlMetadataStore(engine)
    assert store.get("ns", "a") is None
    assert store.put("ns", "a", b"1") == 1
    assert store.put("ns", "a", b"2") == 2
    found = store.get("ns", "a")
    assert found is not None and (found.value, found.version) == (b"2", 2)
    store.put_many("ns", {"b": b"x", "a": b"3"})
    assert {k: (v.value, v.version) for k, v in store.list("ns").items()} == {
        "a": (b"3", 3), "b": (b"x", 1)}
    assert store.list("other") == {}
    assert store.delete("ns", "a")
    assert not store.delete("ns", "a")
    store.ping()


def test_compare_and_set(engine: Engine) -> None:
    store = SqlMetadataStore(engine)
    assert store.compare_and_set("ns", "k", b"first", None) == 1
    assert store.compare_and_set("ns", "k", b"again", None) is None
    assert store.compare_and_set("ns", "k", b"stale", 7) is None
    assert store.compare_and_set("ns", "k", b"second", 1) == 2
    found = store.get("ns", "k")
    assert found is not None and found.value == b"second"


def test_concurrent_compare_and_set_has_one_winner(engine: Engine) -> None:
    store = SqlMetadataStore(engine)
    store.put("ns", "counter", b"0")
    winners: list[int] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        barrier.wait()
        if store.compare_and_set("ns", "counter", str(i).encode(), 1) is not None:
            winners.append(i)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    found = store.get("ns", "counter")
    assert found is not None and found.version == 2


def test_job_models_publish_monotonically_and_prune(engine: Engine) -> None:
    repo = JobModelRepository(SqlMetadataStore(engine), keep_last=3)
    procs = {"w1": "a", "w2": "b"}
    ssps = [SSP("kafka", "in", p) for p in range(4)]
    pointer = None
    for version in range(1, 6):
        model = generate_job_model(version, ssps, GroupByPartition(), 1, procs).job_model
        assert repo.publish(model, pointer)
        latest = repo.latest()
        assert latest is not None and latest[0] == version
        pointer = latest[1]
        if version == 2:
            repo.set_active(2)
    stale = generate_job_model(6, ssps, GroupByPartition(), 1, procs).job_model
    assert not repo.publish(stale, 1)  # a pointer read long ago: fenced
    assert repo.latest() == (5, pointer)
    assert repo.load(6) is None
    assert [v for v in range(1, 6) if repo.load(v) is not None] == [2, 3, 4, 5]


def test_a_100k_task_job_model_round_trips(engine: Engine) -> None:
    repo = JobModelRepository(SqlMetadataStore(engine))
    ssps = [SSP("kafka", "events", p) for p in range(12_500)]
    procs = {f"w{i:03d}": f"h{i}" for i in range(100)}
    model = generate_job_model(1, ssps, GroupByPartition(), 8, procs).job_model
    assert repo.publish(model, None)
    loaded = repo.load(1)
    assert loaded == model
    assert sum(len(c.tasks) for c in loaded.containers.values()) == 100_000


def test_migrations_upgrade_downgrade_last_step_and_back(store_url: str) -> None:
    engine = make_engine(store_url)
    upgrade(engine)
    assert current_revision(engine) == "0002"
    downgrade(engine)
    assert current_revision(engine) == "0001"
    tables = set(inspect(engine).get_table_names())
    assert {"metadata_entries", "checkpoint_entries"} <= tables
    assert "task_checkpoints" not in tables
    upgrade(engine)
    assert current_revision(engine) == "0002"
    engine.dispose()
