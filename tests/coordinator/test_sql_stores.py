"""Alembic migrations of the SQL store, on SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import inspect

from service.database import current_revision, downgrade, make_engine, upgrade


def test_migrations_upgrade_downgrade_last_step_and_back(store_url: str) -> None:
    engine = make_engine(store_url)
    upgrade(engine)
    assert current_revision(engine) == "0003"
    downgrade(engine)
    assert current_revision(engine) == "0002"
    tables = set(inspect(engine).get_table_names())
    assert {"metadata_entries", "checkpoint_entries", "task_checkpoints"} <= tables
    assert "task_key_spaces" not in tables
    upgrade(engine)
    assert current_revision(engine) == "0003"
    engine.dispose()
