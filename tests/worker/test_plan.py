"""The query plan of a worker: assignment, starting offsets, filter and commit, from the
API's JSON (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.plan import EARLIEST, LATEST, QueryPlan, SspStart, plan_query

MODEL: dict[str, Any] = {
    "version": 7, "config": {"elasticityFactor": 2},
    "containers": {"w1": {"tasks": {
        "Partition 0_0_2": {"taskName": "Partition 0_0_2", "taskMode": "Active",
                            "systemStreamPartitions": [{"system": "kafka", "stream": "orders",
                                                        "partition": 0, "keyBucket": 0}]},
        "Partition 0_1_2": {"taskName": "Partition 0_1_2", "taskMode": "Active",
                            "systemStreamPartitions": [{"system": "kafka", "stream": "orders",
                                                        "partition": 0, "keyBucket": 1}]},
        "Partition 3_1_2": {"taskName": "Partition 3_1_2", "taskMode": "Active",
                            "systemStreamPartitions": [{"system": "kafka", "stream": "orders",
                                                        "partition": 3, "keyBucket": 1}]},
        "Partition 5_0_2-standby": {"taskMode": "Standby", "systemStreamPartitions": [
            {"system": "kafka", "stream": "orders", "partition": 5, "keyBucket": 0}]},
    }}}}


def offsets(task: str, partition: int, bucket: int, offset: str) -> dict[str, Any]:
    return {"inputOffsets": [{"ssp": {"system": "kafka", "stream": "orders",
                                      "partition": partition, "keyBucket": bucket},
                              "offset": offset}]}


CHECKPOINTS = {
    "Partition 0_0_2": offsets("Partition 0_0_2", 0, 0, "100") | {"skipBelow": [
        {"ssp": {"system": "kafka", "stream": "orders", "partition": 0},
         "elasticityFactor": 4, "keyBucket": 2, "offset": "130"}]},
    "Partition 0_1_2": offsets("Partition 0_1_2", 0, 1, "120"),
    "Partition 3_1_2": offsets("Partition 3_1_2", 3, 1, "earliest"),
}


def test_assign_and_starting_offsets_take_the_slowest_bucket() -> None:
    plan = plan_query(MODEL, "w1", CHECKPOINTS)
    assert plan.version == 7 and plan.factor == 2
    assert plan.assign() == {"orders": [0, 3]}  # standbys are not read
    assert plan.starting_offsets() == {"orders": {"0": 100, "3": EARLIEST}}


def test_filter_keeps_owned_buckets_and_honours_skip_watermarks() -> None:
    sql = plan_query(MODEL, "w1", CHECKPOINTS).filter_sql()
    # partition 0 is read from 100 (bucket 0's start); bucket 1 only from its own 120
    assert ("(topic = 'orders' AND partition = 0 AND ((keyBucket = 0 AND offset >= 100) OR "
            "(keyBucket = 1 AND offset >= 120)))") in sql
    assert "(topic = 'orders' AND partition = 3 AND (keyBucket IN (1)))" in sql
    assert ("NOT (topic = 'orders' AND partition = 0 AND CASE WHEN key IS NULL THEN "
            "pmod(offset, 4) ELSE pmod(crc32(key), 4) END = 2 AND offset < 130)") in sql


def test_commit_advances_every_bucket_of_a_partition_the_batch_read() -> None:
    plan = plan_query(MODEL, "w1", CHECKPOINTS)
    body = plan.commit({("orders", 0): 150})
    assert set(body) == {"Partition 0_0_2", "Partition 0_1_2"}  # partition 3 had no batch
    assert body["Partition 0_1_2"]["inputOffsets"] == [
        {"ssp": {"system": "kafka", "stream": "orders", "partition": 0, "keyBucket": 1},
         "offset": "150"}]


def test_a_worker_without_tasks_reads_nothing() -> None:
    plan = plan_query(MODEL, "w9", {})
    assert plan.assign() == {} and plan.filter_sql() == "(false)"


starts = st.lists(st.one_of(st.integers(0, 10**6), st.sampled_from([EARLIEST, LATEST])),
                  min_size=1, max_size=8)


@given(starts)
def test_the_partition_start_is_the_earliest_bucket_start(values: list[int]) -> None:
    plan = QueryPlan(1, 8, tuple(SspStart(f"t{i}", "s", 0, i, v)
                                 for i, v in enumerate(values)))
    got = plan.starting_offsets()["s"]["0"]
    if EARLIEST in values:
        assert got == EARLIEST
    elif all(v == LATEST for v in values):
        assert got == LATEST
    else:
        assert got == min(v for v in values if v >= 0)


END = 10**55 + 7  # a Kinesis ending sequence number (56 digits)


def _kinesis_task(p: int, b: int) -> dict[str, Any]:
    return {"taskName": f"Partition {p}_{b}_2", "taskMode": "Active",
            "systemStreamPartitions": [{"system": "kinesis", "stream": "orders",
                                        "partition": p, "keyBucket": b}]}


def _kinesis_offsets(p: int, b: int, offset: str, waiting: bool = False) -> dict[str, Any]:
    return {"inputOffsets": [{"ssp": {"system": "kinesis", "stream": "orders",
                                      "partition": p, "keyBucket": b}, "offset": offset}],
            "waitingFor": [{"system": "kinesis", "stream": "orders", "partition": 0,
                            "keyBucket": b}] if waiting else []}


def test_a_kinesis_plan_skips_finished_and_waiting_key_spaces() -> None:
    model = {"version": 3, "config": {"elasticityFactor": 2, "shards": {"kinesis.orders": {
        "0": {"endingSequenceNumber": str(END)}, "1": {"endingSequenceNumber": None}}}},
        "containers": {"w1": {"tasks": {f"Partition {p}_{b}_2": _kinesis_task(p, b)
                                        for p in (0, 1) for b in (0, 1)}}}}
    plan = plan_query(model, "w1", {
        "Partition 0_0_2": _kinesis_offsets(0, 0, str(END + 1)),  # finished: not read
        "Partition 0_1_2": _kinesis_offsets(0, 1, str(END - 5)),
        "Partition 1_0_2": _kinesis_offsets(1, 0, "earliest"),
        "Partition 1_1_2": _kinesis_offsets(1, 1, "earliest", waiting=True),
    })
    assert plan.system == "kinesis"
    assert [s.task for s in plan.starts] == ["Partition 0_1_2", "Partition 1_0_2"]
    assert plan.waiting == ("Partition 1_1_2",)
    assert plan.kinesis_shards() == {"orders": {
        "0": {"start": str(END - 5), "ending": str(END)},
        "1": {"start": "earliest", "ending": None}}}
    sql = plan.filter_sql()
    assert sql.startswith("NOT endOfShard AND ")
    assert f"offsetKey >= '{str(END - 5).zfill(128)}'" in sql  # as text, beyond int64
    assert plan.bucket_expr() == "pmod(crc32(key), 2)"
    commit = plan.commit({("orders", 0): END + 1})
    assert commit == {"Partition 0_1_2": {"inputOffsets": [{"ssp": {
        "system": "kinesis", "stream": "orders", "partition": 0, "keyBucket": 1},
        "offset": str(END + 1)}]}}


def test_a_worker_reads_one_system_per_query() -> None:
    model = {"version": 1, "config": {}, "containers": {"w1": {"tasks": {
        "A": _kinesis_task(0, 0), **MODEL["containers"]["w1"]["tasks"]}}}}
    with pytest.raises(ValueError, match="mixes"):
        plan_query(model, "w1", {})


def test_task_sql_names_a_bucket_by_its_partition_and_bucket_a_whole_partition_by_its_own(
        ) -> None:
    plan = QueryPlan(1, 2, (SspStart("Partition 0_1_2", "it's", 0, 1, 5),
                            SspStart("Partition 1", "orders", 1, -1, EARLIEST)))
    assert plan.task_sql() == (
        "CASE WHEN topic = 'it\\'s' AND partition = 0 AND keyBucket = 1 THEN "
        "'Partition 0_1_2' WHEN topic = 'orders' AND partition = 1 THEN 'Partition 1' END")
