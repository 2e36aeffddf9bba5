"""A worker's key-bucket counts (``worker.runtime.bucket_counts.BucketCounts``, pure): a
partition's records read again count once in what it saw, so a hot key's bucket keeps its
share (the loaded run where tasks of a partition started behind its others and the hot
bucket was never judged hot)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.bucket_signals import bucket_signals
from worker.plan import QueryPlan
from worker.runtime.bucket_counts import BucketCounts

KEY = ("in", 1)


def _plan(factor: int) -> QueryPlan:
    return QueryPlan(1, factor, ())


def test_a_range_read_again_counts_once_and_the_hot_bucket_stays_hot() -> None:
    counts = BucketCounts(1.0, in_tasks=True)
    # two of the partition's four tasks run first, the hot key's among them
    counts.add(_plan(4), {KEY: {0: 600, 2: 40}}, {KEY: 750}, {KEY: (444, 1194)})
    # the other two start behind, at the factor's start: the range is read again and
    # only they process it
    counts.add(_plan(4), {KEY: {1: 50, 3: 60}}, {KEY: 750}, {KEY: (444, 1194)})
    report = counts.report()
    assert report is not None and report["seen"] == {"in/1": 750}
    hot = bucket_signals({"w1": {"keyBucketCounts": report}}, 4, min_records=100).hot
    assert [(h["keyBucket"], h["share"]) for h in hot] == [(0, 0.8)]


def test_without_spans_what_each_batch_saw_adds_up() -> None:
    counts = BucketCounts(1.0, in_tasks=True)
    counts.add(_plan(2), {KEY: {0: 3, 1: 4}}, {KEY: 7})
    counts.add(_plan(2), {KEY: {0: 1, 1: 2}}, {KEY: 3})
    report = counts.report()
    assert report is not None and report["seen"] == {"in/1": 10}


def test_a_new_factor_counts_its_spans_afresh() -> None:
    counts = BucketCounts(1.0, in_tasks=True)
    counts.add(_plan(2), {KEY: {0: 5, 1: 5}}, {KEY: 10}, {KEY: (0, 10)})
    counts.add(_plan(4), {KEY: {0: 5, 1: 5}}, {KEY: 10}, {KEY: (0, 10)})
    report = counts.report()
    assert report is not None and report["seen"] == {"in/1": 10}


@given(st.integers(0, 1000), st.lists(st.tuples(st.integers(0, 500), st.integers(0, 500)),
                                      min_size=1, max_size=12))
def test_seen_is_the_union_of_the_ranges_read(first: int,
                                               spans: list[tuple[int, int]]) -> None:
    """A partition is read without gaps, from at or after the factor's first start
    (tasks start at their checkpoints, none behind the first batch's), and any range
    again: what the partition saw is the number of distinct offsets read."""
    counts = BucketCounts(1.0, in_tasks=True)
    read: set[int] = set()
    reach = first
    for offset, length in [(0, 1), *spans]:
        start = first + min(offset, reach - first)
        end = start + length
        reach = max(reach, end)
        read.update(range(start, end))
        counts.add(_plan(2), {KEY: {0: 0}}, {KEY: length}, {KEY: (start, end)})
    report = counts.report()
    assert report is not None and report["seen"] == {"in/1": len(read)}
