"""Turning a commit request into rows: what it accepts, what it refuses, how keys map."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpoint.commit import bucket_key, build_commit, commit_index, entry_key
from checkpoint.errors import CheckpointError, CheckpointFormatError
from checkpoint.model import BucketKey, TaskCheckpointMeta
from grouping.model import SystemStreamPartition, TaskModel

P0 = SystemStreamPartition("kafka", "orders", 0)
P1 = SystemStreamPartition("kafka", "orders", 1)
TASKS = [
    TaskModel("Partition 0_0_2", (P0.with_key_bucket(0),), 0),
    TaskModel("Partition 0_1_2", (P0.with_key_bucket(1),), 0),
    TaskModel("Partition 1", (P1,), 1),
]
INDEX = commit_index(TASKS, 2)


def ssp_json(ssp: SystemStreamPartition) -> dict[str, Any]:
    out: dict[str, Any] = {"system": ssp.system, "stream": ssp.stream,
                           "partition": ssp.partition}
    if ssp.has_key_bucket:
        out["keyBucket"] = ssp.key_bucket
    return out


def cp(ssp: SystemStreamPartition, offset: str, **extra: Any) -> dict[str, Any]:
    return {"inputOffsets": [{"ssp": ssp_json(ssp), "offset": offset}], **extra}


def test_rows_are_key_spaces_sorted_with_offsets_and_ids() -> None:
    batch = build_commit({
        "Partition 1": cp(P1, "7"),
        "Partition 0_1_2": cp(P0.with_key_bucket(1), "5", checkpointId="12-34"),
        "Partition 0_0_2": cp(P0.with_key_bucket(0), "3",
                              stateCheckpointMarkers={"blob": {"store": "m"}}),
    }, INDEX)
    assert batch.rows == [
        ("kafka", "orders", 0, 2, 0, 3, None),
        ("kafka", "orders", 0, 2, 1, 5, "12-34"),
        ("kafka", "orders", 1, 1, 0, 7, None),
    ]
    assert batch.task_meta == {
        "Partition 0_1_2": TaskCheckpointMeta("12-34", {}),
        "Partition 0_0_2": TaskCheckpointMeta(None, {"blob": {"store": "m"}}),
    }


def test_whole_partition_accepts_an_explicit_minus_one_bucket() -> None:
    ssp = ssp_json(P1) | {"keyBucket": -1}
    batch = build_commit({"Partition 1": {"inputOffsets": [{"ssp": ssp, "offset": "1"}]}},
                         INDEX)
    assert batch.rows == [("kafka", "orders", 1, 1, 0, 1, None)]


@pytest.mark.parametrize(("checkpoints", "error", "message"), [
    ({"Partition 1": cp(P0.with_key_bucket(0), "1")}, CheckpointError, "does not read"),
    ({"Partition 1": {"inputOffsets": [{"ssp": ssp_json(P1), "offset": "1"}] * 2}},
     CheckpointError, "appears twice"),
    ({"Partition 1": cp(P1, "-5")}, CheckpointFormatError, "non-negative"),
    ({"Partition 1": cp(P1, "1e3")}, CheckpointFormatError, "decimal"),
    ({"Partition 1": cp(P1, "1" * 129)}, CheckpointFormatError, "at most 128"),
    ({"Partition 1": cp(P1, "1", checkpointId="yesterday")}, CheckpointFormatError,
     "checkpoint id"),
])
def test_bad_entries_are_refused_with_the_task_named(
    checkpoints: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        build_commit(checkpoints, INDEX)


ssps = st.builds(SystemStreamPartition, st.sampled_from(["kafka", "kinesis"]),
                 st.text("abc.-_", min_size=1, max_size=8), st.integers(0, 10_000),
                 key_bucket=st.just(-1))


@given(ssps, st.sampled_from([1, 2, 4, 64]), st.data())
def test_entry_key_is_the_bucket_key_as_a_tuple(
    ssp: SystemStreamPartition, factor: int, data: st.DataObject
) -> None:
    if factor > 1:
        ssp = ssp.with_key_bucket(data.draw(st.integers(0, factor - 1)))
    key = entry_key(ssp, factor)
    assert bucket_key(key) == BucketKey.of_ssp(ssp, factor)
