"""The SQL checkpoint store on SQLite and PostgreSQL: monotonic commits, resets, GC."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from checkpoint.model import BucketKey, ResetPolicy, TaskCheckpointMeta
from checkpoint.store.sql import SqlCheckpointStore
from grouping.model import SSP
from service.database import make_engine, upgrade

P0, P1 = SSP("kafka", "in", 0), SSP("kafka", "in", 1)


@pytest.fixture
def store(store_url: str) -> Iterator[SqlCheckpointStore]:
    engine: Engine = make_engine(store_url)
    upgrade(engine)
    yield SqlCheckpointStore(engine)
    engine.dispose()


def commit(store: SqlCheckpointStore, entries: dict[BucketKey, int], version: int = 1) -> int:
    return store.commit(entries, {}, job_model_version=version, processor_id="w1").advanced


def test_commit_is_monotonic(store: SqlCheckpointStore) -> None:
    a, b = BucketKey(P0, 2, 0), BucketKey(P0, 2, 1)
    assert commit(store, {a: 10, b: 5}) == 2
    assert commit(store, {a: 7, b: 9}) == 1
    assert store.read_entries([P0]) == {a: 10, b: 9}
    assert store.read_entries([P1]) == {}


def test_task_meta_round_trips(store: SqlCheckpointStore) -> None:
    store.commit({BucketKey(P0, 1, 0): 1},
                 {"Partition 0": TaskCheckpointMeta("1-2", {"blob": {"s": "m"}})},
                 job_model_version=3, processor_id="w9")
    meta = store.read_task_meta(["Partition 0", "nope"])
    assert meta == {"Partition 0": TaskCheckpointMeta("1-2", {"blob": {"s": "m"}}, 3)}
    # which task last wrote state for each key space: how a split or merge finds it
    assert store.read_state_holders([P0, P1]) == {
        "Partition 0": [(P0.system, P0.stream, P0.partition, 1, 0)]}
    store.commit({BucketKey(P0, 2, 1): 5},
                 {"Partition 0_1_2": TaskCheckpointMeta("2-0", {"blob": {"s": "n"}})},
                 job_model_version=4, processor_id="w9")
    assert store.read_state_holders([P0]) == {
        "Partition 0": [(P0.system, P0.stream, P0.partition, 1, 0)],
        "Partition 0_1_2": [(P0.system, P0.stream, P0.partition, 2, 1)]}


def test_reset_moves_back_and_policy_resets_are_remembered(store: SqlCheckpointStore) -> None:
    commit(store, {BucketKey(P0, 2, 0): 100, BucketKey(P0, 2, 1): 90})
    store.reset(P0, 5)
    assert store.read_entries([P0]) == {BucketKey(P0, 1, 0): 5}
    store.reset(P0, ResetPolicy.LATEST)
    assert store.read_entries([P0]) == {}
    assert store.read_resets([P0, P1]) == {P0: ResetPolicy.LATEST}


def test_garbage_collection_deletes_only_dominated_entries(store: SqlCheckpointStore) -> None:
    commit(store, {BucketKey(P0, 4, 1): 50, BucketKey(P0, 4, 3): 80, BucketKey(P0, 2, 1): 60})
    assert store.collect_garbage([P0]) == 1
    assert store.read_entries([P0]) == {BucketKey(P0, 4, 3): 80, BucketKey(P0, 2, 1): 60}


def test_concurrent_commits_keep_the_maximum(store: SqlCheckpointStore) -> None:
    keys = [BucketKey(P0, 8, b) for b in range(8)]
    best: dict[BucketKey, int] = {}
    lock = threading.Lock()

    def writer(seed: int) -> None:
        rnd = random.Random(seed)
        for _ in range(20):
            batch = {k: rnd.randrange(1000) for k in rnd.sample(keys, 4)}
            commit(store, batch)
            with lock:
                for k, o in batch.items():
                    best[k] = max(best.get(k, -1), o)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.read_entries([P0]) == best


def test_offsets_of_kinesis_length_are_exact_and_ordered_as_numbers(
        store: SqlCheckpointStore) -> None:
    """Sequence numbers of up to 128 digits: stored exactly (SQLite's NUMERIC would keep
    15 digits), compared as numbers across digit counts."""
    key = BucketKey(P0, 1, 0)
    small, large = 49_680_495_734_749_429_435_897_711_455_540_000_172_574_159, 10**127 + 1
    assert commit(store, {key: small}) == 1
    assert commit(store, {key: large}) == 1
    assert store.read_entries([P0]) == {key: large}
    assert commit(store, {key: large - 1}) == 0  # one less, same length: not an advance
    assert commit(store, {key: small}) == 0
    assert store.read_entries([P0]) == {key: large}


def test_forget_deletes_only_the_given_partitions_key_spaces(store: SqlCheckpointStore) -> None:
    """Shards trimmed after retention: their entries, state holders and resets go; the
    others' stay."""
    from checkpoint.model import TaskCheckpointMeta

    store.commit({BucketKey(P0, 2, 0): 10, BucketKey(P0, 2, 1): 12, BucketKey(P1, 2, 0): 7},
                 {"Partition 0_0_2": TaskCheckpointMeta("1-1", {"b": {"s": "m"}}),
                  "Partition 1_0_2": TaskCheckpointMeta("1-2", {"b": {"s": "n"}})},
                 job_model_version=1, processor_id="w1")
    assert store.forget([P0]) == 2
    assert store.read_entries([P0, P1]) == {BucketKey(P1, 2, 0): 7}
    assert set(store.read_state_holders([P0, P1])) == {"Partition 1_0_2"}
    assert store.forget([P0]) == 0  # nothing left: a no-op
