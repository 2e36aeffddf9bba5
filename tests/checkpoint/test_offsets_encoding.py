"""The sortable text of offsets: exact and ordered as the numbers are."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoint.model import MAX_OFFSET_DIGITS
from checkpoint.store.offsets import decode_offset, encode_offset

offsets = st.integers(0, 10**MAX_OFFSET_DIGITS - 1)


@given(offsets)
def test_round_trip(offset: int) -> None:
    assert decode_offset(encode_offset(offset)) == offset


@given(offsets, offsets)
def test_text_order_is_number_order(a: int, b: int) -> None:
    assert (encode_offset(a) < encode_offset(b)) == (a < b)


@pytest.mark.parametrize("bad", [-1, 10**MAX_OFFSET_DIGITS])
def test_out_of_range_is_refused(bad: int) -> None:
    with pytest.raises(ValueError):
        encode_offset(bad)
