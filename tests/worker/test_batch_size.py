"""Steering a worker's batch size (pure): within bounds, toward the target duration on
a batch's usual cost, never collapsing when a batch's fixed cost exceeds the target."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.batch_size import (
    FIRST_LIMIT,
    FIRST_TIMED_LIMIT,
    MAX_FIXED_SHARE,
    MAX_GROWTH,
    TIME_CUT_SHARE,
    BatchSize,
    after_batch,
    after_time_cut,
    default_target_s,
    start,
)

targets = st.floats(0.1, 5.0)
ceilings = st.none() | st.integers(1, 100_000)


@given(targets, ceilings, st.lists(st.tuples(st.integers(-5, 200_000),
                                             st.floats(-1.0, 100.0) | st.just(float("nan"))),
                                   max_size=60))
def test_the_limit_stays_between_one_record_and_the_ceiling(
        target: float, ceiling: int | None, batches: list[tuple[int, float]]) -> None:
    size = start(target, ceiling)
    assert size.limit == (FIRST_LIMIT if ceiling is None else min(ceiling, FIRST_LIMIT))
    for records, seconds in batches:
        size = after_batch(size, records, seconds)
        assert 1 <= size.limit <= (ceiling or FIRST_LIMIT * MAX_GROWTH ** len(batches))
        assert size.fixed_s >= 0


@settings(max_examples=2000)
@given(targets, st.floats(0.0, 3.0), st.floats(1e-6, 0.05), st.none() | st.integers(50, 10**6))
def test_full_batches_converge_to_the_target_or_bound_their_fixed_cost(
        target: float, fixed: float, per_record: float, ceiling: int | None) -> None:
    """On ``seconds = fixed + per_record * records`` with a backlog: the batch ends near
    the target, or, when the fixed cost alone is near it, near the duration where the
    fixed cost is a bounded share; never at one record per batch."""
    size = start(target, ceiling)
    for _ in range(120):
        size = after_batch(size, size.limit, fixed + per_record * size.limit)
    took = fixed + per_record * size.limit
    if ceiling is not None and size.limit == ceiling:
        assert took <= max(target, fixed / MAX_FIXED_SHARE) * 1.1  # the ceiling holds it
        return
    steered = max(target, fixed / MAX_FIXED_SHARE)
    if size.limit <= 2:  # three records would take the steered duration: nothing to trade
        assert fixed + per_record * 3 >= steered * 0.9
        assert per_record * size.limit >= fixed * 0.1  # ...but not a collapse to overhead
        return
    # (within a record's cost: a limit is a whole number of records)
    assert target * 0.9 - per_record <= took
    assert took <= steered * 1.1 + per_record
    if fixed >= 1.2 * target:  # the fixed cost never takes most of a batch
        assert fixed / took <= MAX_FIXED_SHARE * 1.25


@given(st.builds(lambda t, c, n: after_batch(start(t, c), n, t), targets, ceilings,
                 st.integers(1, 10_000)),
       st.floats(0.01, 0.89), st.floats(0.001, 50.0))
def test_a_batch_the_source_could_not_fill_never_lowers_the_limit(
        size: BatchSize, share: float, seconds: float) -> None:
    records = max(1, int(size.limit * share))
    if records >= 0.9 * size.limit:
        return
    assert after_batch(size, records, seconds).limit >= size.limit


@given(targets, st.integers(10, 100_000), st.floats(1.05, 20.0))
def test_a_full_batch_slower_than_wanted_lowers_the_limit_and_a_faster_one_raises_it(
        target: float, limit: int, factor: float) -> None:
    size = BatchSize(target, None, limit)
    assert after_batch(size, limit, target * factor).limit <= limit
    assert after_batch(size, limit, target / factor).limit >= limit


@given(st.floats(0.0, 1.0), st.floats(1e-6, 1e-3))
def test_a_backlog_reaches_the_target_in_a_few_batches(fixed: float, per_record: float
                                                       ) -> None:
    """From the first limit, full batches of ``fixed + per_record * records`` reach half
    the 8 s target within 5 batches (doubling took up to 9), and never overshoot it."""
    size = start(8.0, None)
    took = []
    for _ in range(5):
        took.append(fixed + per_record * size.limit)
        size = after_batch(size, size.limit, took[-1])
    steered = max(8.0, fixed / MAX_FIXED_SHARE)
    assert fixed + per_record * size.limit >= 0.5 * steered
    assert max(took) <= steered * 1.05


def test_a_batch_is_full_against_the_limit_it_was_read_under() -> None:
    """A batch is measured once the next one started: the limit may have grown since.
    999 records read under 1000 were a full batch, whatever the limit is now."""
    size = BatchSize(8.0, None, 8000)
    grown = after_batch(size, 999, 0.74, read_under=1000)
    assert grown.limit > 8000 and grown.samples == ((999, 0.74),)  # a full batch's sample
    assert after_batch(size, 999, 0.74).samples == ()  # under 8000: the source had no more


def test_a_bad_target_or_ceiling_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        start(0.0, None)
    with pytest.raises(ValueError, match="at least 1"):
        start(1.0, 0)


def test_batches_that_cannot_be_cut_default_to_a_short_target() -> None:
    # --api task batches are cut by a change; an --api batch batch is one call of the
    # user's function, so a handover waits for it whole: 8 s would be 8 s of handover
    assert default_target_s("task") == 8.0
    assert default_target_s("batch") == 1.0


@given(targets, ceilings)
def test_batches_cut_by_time_start_from_a_backlogs_share_not_a_probe(
        target: float, ceiling: int | None) -> None:
    size = start(target, ceiling, timed_cuts=True)
    assert size.limit == (FIRST_TIMED_LIMIT if ceiling is None
                          else min(ceiling, FIRST_TIMED_LIMIT))
    assert size.cut_after_s == pytest.approx(TIME_CUT_SHARE * size.steering_s)
    assert start(target, ceiling).cut_after_s is None  # (--api batch: never cut)


@settings(max_examples=500)
@given(targets, st.floats(0.0, 0.5), st.floats(1e-6, 0.05), st.none() | st.integers(50, 10**6))
def test_a_first_batch_cut_for_time_lands_the_next_near_the_target_at_once(
        target: float, fixed: float, per_record: float, ceiling: int | None) -> None:
    """A first batch too big to finish is cut at ``cut_after_s`` having processed what
    fit: the next batch's limit is the measured fit, within the target (never above the
    limit it ran long at, nor the ceiling), with no ramp of several batches."""
    size = start(target, ceiling, timed_cuts=True)
    cut_after = size.cut_after_s
    assert cut_after is not None
    if fixed + per_record * size.limit <= cut_after:
        return  # it would not be cut: steered as before
    processed = max(0, int((cut_after - fixed) / per_record))
    after = after_time_cut(size, processed, cut_after)
    assert 1 <= after.limit <= size.limit
    if processed == 0:  # nothing got through: a smaller batch next (never the same again)
        assert after.limit < size.limit or size.limit == 1
        return
    assert ceiling is None or after.limit <= ceiling
    # the next batch takes about the steered duration: over it by at most the share of
    # the fixed cost the proportional measure leaves out, most of it when records
    # dominate
    took = fixed + per_record * after.limit
    assert took <= size.steering_s * 1.01 + fixed * (1 - 1 / TIME_CUT_SHARE) + per_record
    if fixed <= 0.1 * target and per_record <= 0.05 * target:  # (whole records)
        assert took >= 0.7 * size.steering_s


@given(st.integers(1, FIRST_TIMED_LIMIT), st.floats(0.5, 60.0))
def test_a_first_batch_cut_while_spark_warmed_up_keeps_at_least_what_it_processed(
        processed: int, seconds: float) -> None:
    size = start(2.0, None, timed_cuts=True)
    warm = after_time_cut(size, processed, seconds, warming=True)
    assert warm.limit >= min(processed, size.limit)
    assert warm.limit >= after_time_cut(size, processed, seconds).limit


def test_a_time_cut_without_a_measure_changes_nothing() -> None:
    size = start(8.0, None, timed_cuts=True)
    assert after_time_cut(size, -1, 10.0) == size
    assert after_time_cut(size, 100, float("nan")) == size
