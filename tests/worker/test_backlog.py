"""A worker's backlog per task from its query's progress (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from worker.plan import QueryPlan, SspStart
from worker.runtime.backlog import latest_offsets, task_backlog


def kafka_plan(factor: int) -> QueryPlan:
    return QueryPlan(version=3, factor=factor, starts=tuple(
        SspStart(f"Partition {p}_{b}_{factor}", "orders", p, b, 0)
        for p in range(2) for b in range(factor)))


def test_the_latest_offsets_come_from_the_progress_as_json_or_text() -> None:
    assert latest_offsets(None) is None
    assert latest_offsets({"sources": []}) is None
    assert latest_offsets({"sources": [{"latestOffset": {"orders/0": 5}}]}) == {"orders/0": 5}
    assert latest_offsets({"sources": [{"latestOffset": '{"orders/0": 5}'}]}) == {
        "orders/0": 5}
    assert latest_offsets({"sources": [{"latestOffset": "null"}]}) == {}


def test_each_bucket_of_a_kafka_partition_is_behind_by_the_whole_partition() -> None:
    stats, behind = task_backlog(kafka_plan(2), {"orders/0": 100, "orders/1": 40},
                                 {("orders", 0): 70, ("orders", 1): 40})
    assert stats == {"consumerLag": {"Partition 0_0_2": 30, "Partition 0_1_2": 30,
                                     "Partition 1_0_2": 0, "Partition 1_1_2": 0}}
    assert behind == 30  # each partition once, not once per bucket


def test_a_partition_not_committed_yet_or_not_reported_has_no_lag() -> None:
    stats, behind = task_backlog(kafka_plan(1), {"orders/0": 100}, {("orders", 1): 3})
    assert stats == {"consumerLag": {}}
    assert behind == 0


@given(st.integers(1, 8), st.integers(0, 10**6), st.integers(0, 10**6))
def test_the_total_behind_never_counts_a_partition_twice_nor_negative(
        factor: int, end: int, done: int) -> None:
    _, behind = task_backlog(kafka_plan(factor), {"orders/0": end, "orders/1": end},
                             {("orders", 0): done, ("orders", 1): done})
    assert behind == 2 * max(0, end - done)


def test_kinesis_buckets_share_their_shards_records_and_keep_its_milliseconds() -> None:
    plan = QueryPlan(version=1, factor=2, system="kinesis", starts=(
        SspStart("Partition 0_0_2", "s", 0, 0, 0), SspStart("Partition 0_1_2", "s", 0, 1, 0),
        SspStart("Partition 1", "s", 1, -1, 0)))
    stats, behind = task_backlog(plan, {
        "0": {"recordsBehind": 101, "millisBehindLatest": 900},
        "1": {"recordsBehind": 7, "millisBehindLatest": 50}}, {})
    assert stats == {
        "consumerLag": {"Partition 0_0_2": 50, "Partition 0_1_2": 50, "Partition 1": 7},
        "consumerLagMs": {"Partition 0_0_2": 900, "Partition 0_1_2": 900, "Partition 1": 50}}
    assert behind is None  # the progress lines count Kafka's records only
