"""Metadata entries and per-key-bucket checkpoint entries.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "metadata_entries",
        sa.Column("namespace", sa.String(128), primary_key=True),
        sa.Column("key", sa.String(512), primary_key=True),
        sa.Column("value", sa.LargeBinary, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_table(
        "checkpoint_entries",
        sa.Column("system", sa.String(255), primary_key=True),
        sa.Column("stream", sa.String(255), primary_key=True),
        sa.Column("partition", sa.Integer, primary_key=True),
        sa.Column("factor", sa.Integer, primary_key=True),
        sa.Column("bucket", sa.Integer, primary_key=True),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.Column("checkpoint_id", sa.String(64)),
        sa.Column("job_model_version", sa.BigInteger, nullable=False),
        sa.Column("processor_id", sa.String(255), nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("checkpoint_entries")
    op.drop_table("metadata_entries")
