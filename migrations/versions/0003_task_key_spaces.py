"""Which task last committed state for each key space (stateful elasticity).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "task_key_spaces",
        sa.Column("system", sa.String(255), primary_key=True),
        sa.Column("stream", sa.String(255), primary_key=True),
        sa.Column("partition", sa.Integer, primary_key=True),
        sa.Column("factor", sa.Integer, primary_key=True),
        sa.Column("bucket", sa.Integer, primary_key=True),
        sa.Column("task_name", sa.String(512), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("task_key_spaces")
