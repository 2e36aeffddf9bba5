"""Offsets in SQL: exact, of any length up to 128 digits, and ordered by plain comparison.

Kafka offsets fit a BIGINT, Kinesis sequence numbers (decimal strings of up to 128 digits)
do not, and SQLite's NUMERIC keeps only 15 significant digits. So an offset is stored as
text: its digit count in three digits, then its digits ("0031000" is 1000). Such strings
compare as their numbers do (more digits first decides, then digit by digit), so the
store's monotonic upsert (``WHERE stored < new``) stays one SQL comparison; on PostgreSQL
the column's collation is "C", so no locale rule can reorder digits.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import String
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from checkpoint.model import MAX_OFFSET_DIGITS

WIDTH = 3 + MAX_OFFSET_DIGITS


def encode_offset(offset: int) -> str:
    """The sortable text of ``offset`` (>= 0, at most 128 digits)."""
    digits = str(offset)
    if offset < 0 or len(digits) > MAX_OFFSET_DIGITS:
        raise ValueError(f"offset {offset} outside 0 .. 10**{MAX_OFFSET_DIGITS} - 1")
    return f"{len(digits):03d}{digits}"


def decode_offset(text: str) -> int:
    """The offset whose sortable text is ``text``."""
    return int(text[3:])


def offset_text_type() -> TypeEngine[str]:
    """The column's text type: "C" collation on PostgreSQL (SQLite compares bytes)."""
    return String(WIDTH).with_variant(String(WIDTH, collation="C"), "postgresql")


class SortableOffset(TypeDecorator[int]):
    """An offset column: Python ints in, Python ints out, sortable text in between."""

    impl = String(WIDTH)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(String(WIDTH, collation="C"))
        return dialect.type_descriptor(String(WIDTH))

    def process_bind_param(self, value: int | None, dialect: Dialect) -> str | None:
        return None if value is None else encode_offset(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> int | None:
        return None if value is None else decode_offset(value)
