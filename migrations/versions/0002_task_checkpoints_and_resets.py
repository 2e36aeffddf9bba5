"""Checkpoint v2 metadata per task, and operator resets per partition.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_checkpoints",
        sa.Column("task_name", sa.String(512), primary_key=True),
        sa.Column("checkpoint_id", sa.String(64)),
        sa.Column("state_checkpoint_markers", sa.Text, nullable=False),
        sa.Column("job_model_version", sa.BigInteger, nullable=False),
        sa.Column("processor_id", sa.String(255), nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_table(
        "partition_resets",
        sa.Column("system", sa.String(255), primary_key=True),
        sa.Column("stream", sa.String(255), primary_key=True),
        sa.Column("partition", sa.Integer, primary_key=True),
        sa.Column("policy", sa.String(16), nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("partition_resets")
    op.drop_table("task_checkpoints")
