"""Which batches run in the driver (``worker.runtime.driver_batches``, pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from worker.runtime.driver_batches import BUDGET_S, PROBE_RECORDS, WINDOW, DriverBatches

#: (records, seconds) of batches the driver ran
runs = st.lists(st.tuples(st.integers(1, 2000), st.floats(0.0, 5.0)), max_size=30)


def _after(policy: DriverBatches, measured: list[tuple[int, float]]) -> DriverBatches:
    for records, seconds in measured:
        policy = policy.after(records, seconds)
    return policy


@given(runs, st.integers(0, 3000), st.integers(-5, 3000))
def test_never_more_than_the_cap_and_one_record_always_under_it(
        measured: list[tuple[int, float]], most: int, records: int) -> None:
    policy = _after(DriverBatches(most_records=most), measured)
    if records <= 0 or records > most:
        assert not policy.takes(records)
    if records == 1 and most >= 1:
        assert policy.takes(1)


@given(runs, st.integers(1, 3000), st.integers(1, 3000))
def test_a_batch_that_runs_there_means_every_smaller_one_does(
        measured: list[tuple[int, float]], bigger: int, smaller: int) -> None:
    policy = _after(DriverBatches(), measured)
    small, big = sorted((smaller, bigger))
    if policy.takes(big):
        assert policy.takes(small)


@given(runs, st.integers(2, 1000))
def test_what_runs_there_is_estimated_within_the_budget_once_measured(
        measured: list[tuple[int, float]], records: int) -> None:
    policy = _after(DriverBatches(), measured)
    estimate = policy.estimate_s(records)
    if estimate is None:
        assert policy.takes(records) == (records <= PROBE_RECORDS)
    else:
        assert policy.takes(records) == (estimate <= BUDGET_S)


@given(st.floats(0.0, 0.5), st.floats(0.0, 0.01),
       st.lists(st.integers(1, 1000), min_size=1, max_size=20), st.integers(1, 5000))
def test_a_job_whose_records_cost_alike_is_never_underestimated(
        fixed: float, per_record: float, sizes: list[int], records: int) -> None:
    policy = DriverBatches().after(1, 5.0)  # (the first: not measured)
    for n in sizes:
        policy = policy.after(n, fixed + per_record * n)
    estimate = policy.estimate_s(records)
    assert estimate is not None
    assert estimate >= (fixed + per_record * records) * (1 - 1e-9)


def test_the_first_batch_is_not_measured_and_slow_records_send_batches_to_spark() -> None:
    policy = DriverBatches().after(1, 0.6)  # the first: consumers connecting, imports
    assert policy.estimate_s(10) is None
    assert policy.takes(PROBE_RECORDS) and not policy.takes(PROBE_RECORDS + 1)
    policy = policy.after(1, 0.008).after(10, 0.008 + 9 * 0.002)  # 2 ms a record
    assert policy.takes(19) and not policy.takes(20)  # 26 ms * 1.9 = 49 ms; * 2 = 52 ms
    assert policy.takes(1)  # (always)
    fast = DriverBatches().after(1, 0.6).after(1, 0.008).after(300, 0.008 + 299 * 20e-6)
    assert fast.takes(1000) and not fast.takes(1001)  # 47 ms, but over the cap
    assert not DriverBatches(most_records=0).takes(1)
    slow = fast
    for _ in range(WINDOW):  # the job got slower: the fast batches leave the window
        slow = slow.after(2, 0.2)
    assert not slow.takes(2) and slow.takes(1)
