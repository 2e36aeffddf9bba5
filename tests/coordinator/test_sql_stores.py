"""Alembic migrations of the SQL store, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text

from checkpoint.model import BucketKey
from checkpoint.store.sql import SqlCheckpointStore
from grouping.model import SystemStreamPartition
from service.database import current_revision, downgrade, make_engine, upgrade

P0 = SystemStreamPartition("kafka", "in", 0)


def test_migrations_upgrade_downgrade_and_back(store_url: str) -> None:
    engine = make_engine(store_url)
    upgrade(engine)
    assert current_revision(engine) == "0004"
    downgrade(engine, "0002")
    assert current_revision(engine) == "0002"
    tables = set(inspect(engine).get_table_names())
    assert {"metadata_entries", "checkpoint_entries", "task_checkpoints"} <= tables
    assert "task_key_spaces" not in tables
    upgrade(engine)
    assert current_revision(engine) == "0004"
    engine.dispose()


def test_exact_offsets_migration_keeps_every_offset_and_its_order(store_url: str) -> None:
    """0004 turns BIGINT offsets into sortable text in place: the values and the
    monotonic upsert's order survive (999 < 1000, as numbers, not as text)."""
    engine = make_engine(store_url)
    upgrade(engine, "0003")
    offsets = {0: 999, 1: 1000, 2: 2**63 - 1, 3: 0}
    with engine.begin() as conn:
        for bucket, offset in offsets.items():
            conn.execute(text(
                'INSERT INTO checkpoint_entries (system, stream, partition, factor, bucket, '
                '"offset", checkpoint_id, job_model_version, processor_id, updated_at) '
                "VALUES ('kafka', 'in', 0, 4, :b, :o, NULL, 1, 'w1', 0)"),
                {"b": bucket, "o": offset})
    upgrade(engine)
    store = SqlCheckpointStore(engine)
    assert store.read_entries([P0]) == {BucketKey(P0, 4, b): o for b, o in offsets.items()}
    # 999 -> 1000 advances; 1000 -> 999 does not (a text comparison would say otherwise)
    assert store.commit({BucketKey(P0, 4, 0): 1000}, {}, job_model_version=2,
                        processor_id="w1").advanced == 1
    assert store.commit({BucketKey(P0, 4, 1): 999}, {}, job_model_version=2,
                        processor_id="w1").advanced == 0
    # a Kinesis sequence number of 128 digits, exactly
    seq = int("4" + "9" * 127)
    store.commit({BucketKey(P0, 4, 3): seq}, {}, job_model_version=2, processor_id="w1")
    assert store.read_entries([P0])[BucketKey(P0, 4, 3)] == seq
    with pytest.raises(RuntimeError, match="BIGINT cannot hold them"):
        downgrade(engine)
    assert current_revision(engine) == "0004"  # refused whole: nothing converted
    store.reset(P0, 12345)
    downgrade(engine)
    with engine.connect() as conn:
        back = conn.execute(text('SELECT "offset" FROM checkpoint_entries')).scalar_one()
    assert back == 12345  # a BIGINT again
    engine.dispose()
