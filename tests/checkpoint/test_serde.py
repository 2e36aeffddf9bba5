"""Checkpoint v1/v2 serde: round trips, both versions read, Samza's JSON read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoint.errors import CheckpointFormatError
from checkpoint.model import (
    CheckpointId,
    CheckpointV1,
    CheckpointV2,
    ResetPolicy,
    parse_offset,
    parse_start_offset,
    upgrade,
)
from checkpoint.serde import checkpoint_from_json, checkpoint_to_json
from grouping.model import SSP

text = st.text(min_size=1, max_size=10)
ssps = st.builds(SSP, text, text, st.integers(0, 500), st.integers(-1, 63))
offsets = st.dictionaries(ssps, st.integers(0, 10**128 - 1).map(str), max_size=6)
markers = st.dictionaries(text, st.dictionaries(text, text, max_size=3), max_size=3)
ids = st.builds(CheckpointId, st.integers(0, 2**45), st.integers(0, 999_999))


@given(offsets)
def test_v1_round_trips(input_offsets: dict[SSP, str]) -> None:
    cp = CheckpointV1.of(input_offsets)
    assert checkpoint_from_json(checkpoint_to_json(cp)) == cp


@given(ids, offsets, markers)
def test_v2_round_trips(
    cid: CheckpointId, input_offsets: dict[SSP, str], m: dict[str, dict[str, str]]
) -> None:
    cp = CheckpointV2.of(cid, input_offsets, m)
    back = checkpoint_from_json(checkpoint_to_json(cp))
    assert back == cp
    assert isinstance(back, CheckpointV2)
    assert back.to_v1() == CheckpointV1.of(input_offsets)


@given(ids)
def test_checkpoint_id_string_form_round_trips(cid: CheckpointId) -> None:
    assert CheckpointId.parse(str(cid)) == cid


def test_checkpoint_id_from_time_and_order() -> None:
    cid = CheckpointId.of(1_614_147_487_244_033_577)
    assert str(cid) == "1614147487244-33577"
    assert CheckpointId(1, 2) < CheckpointId(1, 10) < CheckpointId(2, 0)


def test_v1_upgrades_to_v2_with_no_markers() -> None:
    v1 = CheckpointV1.of({SSP("k", "s", 0): "5"})
    v2 = upgrade(v1, CheckpointId(1, 1))
    assert v2.input_offsets == v1.input_offsets
    assert dict(v2.state_checkpoint_markers) == {}


def test_samza_v1_json_is_read() -> None:
    data = {"SystemStreamPartition [test-system, test-stream, 777]":
            {"system": "test-system", "partition": "777", "offset": "1",
             "stream": "test-stream"}}
    cp = checkpoint_from_json(data)
    assert cp == CheckpointV1.of({SSP("test-system", "test-stream", 777): "1"})


def test_samza_v2_json_is_read() -> None:
    data = {"checkpoint-id": "1614147487244-33577", "input-offsets": {"kafka.in.0": "42"},
            "state-checkpoint-markers": {"factory1": {"store1": "marker1"}}}
    cp = checkpoint_from_json(data)
    assert isinstance(cp, CheckpointV2)
    assert cp.checkpoint_id == CheckpointId(1614147487244, 33577)
    assert dict(cp.input_offsets) == {SSP("kafka", "in", 0): "42"}
    assert dict(cp.state_checkpoint_markers["factory1"]) == {"store1": "marker1"}


@pytest.mark.parametrize("data, message", [
    ([], "expected a JSON object"),
    ({"version": 3}, "expected 1 or 2"),
    ({"version": 2, "inputOffsets": []}, "needs a checkpointId"),
    ({"version": 2, "checkpointId": "abc"}, "checkpoint id"),
    ({"version": 1, "inputOffsets": [{"ssp": {"system": "k"}, "offset": "1"}]}, "missing"),
    ({"version": 1, "inputOffsets": [
        {"ssp": {"system": "k", "stream": "s", "partition": 0}, "offset": 5}]}, "strings"),
    ({"version": 1, "inputOffsets": "x"}, "expected a list"),
])
def test_malformed_checkpoints_are_refused(data: object, message: str) -> None:
    with pytest.raises(CheckpointFormatError, match=message):
        checkpoint_from_json(data)


@pytest.mark.parametrize("raw", ["-1", "1.5", "abc", "", " 1", True, -3, 10**128, "١٢"])
def test_bad_offsets_are_refused(raw: object) -> None:
    with pytest.raises(CheckpointFormatError):
        parse_offset(raw)


def test_start_offsets_accept_reset_policies() -> None:
    assert parse_start_offset("earliest") is ResetPolicy.EARLIEST
    assert parse_start_offset("latest") is ResetPolicy.LATEST
    assert parse_start_offset("17") == 17
