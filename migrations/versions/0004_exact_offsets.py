"""Offsets as exact sortable text: Kinesis sequence numbers have up to 128 digits.

``checkpoint_entries.offset`` was a BIGINT. It becomes the digit count in three digits
followed by the digits (``checkpoint/store/offsets.py``), which compares as the number
does, with the "C" collation on PostgreSQL. Existing offsets are converted in place, in
the migration's transaction; a downgrade converts back and refuses offsets beyond BIGINT.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

WIDTH = 3 + 128
INT64_DIGITS = 18  # every offset of at most 18 digits fits a BIGINT


def _text() -> sa.types.TypeEngine[str]:
    return sa.String(WIDTH).with_variant(sa.String(WIDTH, collation="C"), "postgresql")


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    with op.batch_alter_table("checkpoint_entries") as batch:
        batch.add_column(sa.Column("offset_text", _text(), nullable=True))
    encode = ("lpad(length(\"offset\"::text)::text, 3, '0') || \"offset\"::text" if postgres
              else "printf('%03d', length(\"offset\")) || \"offset\"")
    op.execute(f'UPDATE checkpoint_entries SET offset_text = {encode}')
    with op.batch_alter_table("checkpoint_entries") as batch:
        batch.drop_column("offset")
        batch.alter_column("offset_text", new_column_name="offset", nullable=False,
                           existing_type=_text())


def downgrade() -> None:
    too_long = op.get_bind().execute(sa.text(
        "SELECT count(*) FROM checkpoint_entries WHERE length(\"offset\") > :w"),
        {"w": 3 + INT64_DIGITS}).scalar()
    if too_long:
        raise RuntimeError(f"{too_long} checkpoint offsets have more than {INT64_DIGITS} "
                           "digits (Kinesis sequence numbers): a BIGINT cannot hold them")
    with op.batch_alter_table("checkpoint_entries") as batch:
        batch.add_column(sa.Column("offset_int", sa.BigInteger, nullable=True))
    op.execute('UPDATE checkpoint_entries SET offset_int = CAST(substr("offset", 4) AS BIGINT)')
    with op.batch_alter_table("checkpoint_entries") as batch:
        batch.drop_column("offset")
        batch.alter_column("offset_int", new_column_name="offset", nullable=False,
                           existing_type=sa.BigInteger)
