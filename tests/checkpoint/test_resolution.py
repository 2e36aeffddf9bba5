"""The checkpoint resolution rule: scenarios, Samza's ElasticityUtils cases, domination."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from checkpoint.model import BucketKey, ResetPolicy, SkipWatermark
from checkpoint.resolution import (
    TaskStart,
    dominated,
    merge_commit,
    resolve_ssp_start,
    resolve_task_start,
)
from grouping.model import SSP

P0 = SSP("kafka", "in", 0)


def kb(bucket: int) -> SSP:
    return P0.with_key_bucket(bucket)


def test_no_history_gets_the_reset_policy() -> None:
    assert resolve_ssp_start(kb(1), 2, {}).start is ResetPolicy.EARLIEST
    latest = resolve_ssp_start(kb(1), 2, {}, ResetPolicy.LATEST)
    assert latest.start is ResetPolicy.LATEST
    assert latest.skip_below == ()


def test_split_child_starts_at_parent_watermark() -> None:
    entries = {(1, 0): 120}
    for bucket in (0, 1):
        start = resolve_ssp_start(kb(bucket), 2, entries)
        assert start.start == 120
        assert start.skip_below == ()


def test_merge_starts_at_slowest_child_and_skips_what_faster_children_did() -> None:
    entries = {(4, 1): 50, (4, 3): 80}
    start = resolve_ssp_start(kb(1), 2, entries)
    assert start.start == 50
    assert start.skip_below == (SkipWatermark(P0, 4, 3, 80),)


def test_merge_with_an_unprocessed_child_uses_the_reset_policy_for_it() -> None:
    start = resolve_ssp_start(kb(1), 2, {(4, 1): 50})
    assert start.start is ResetPolicy.EARLIEST
    assert start.skip_below == (SkipWatermark(P0, 4, 1, 50),)
    latest = resolve_ssp_start(kb(1), 2, {(4, 1): 50}, ResetPolicy.LATEST)
    assert latest.start == 50
    assert latest.skip_below == (SkipWatermark(P0, 4, 3, ResetPolicy.LATEST),)


def test_whole_partition_task_sees_every_bucket() -> None:
    start = resolve_ssp_start(P0, 1, {(2, 0): 10, (2, 1): 30})
    assert start.start == 10
    assert start.skip_below == (SkipWatermark(P0, 2, 1, 30),)


def test_ancestor_ahead_of_descendants_wins() -> None:
    # scale down then up again: the coarse entry moved past the old fine ones
    start = resolve_ssp_start(kb(0), 4, {(4, 0): 10, (2, 0): 40, (1, 0): 25})
    assert start.start == 40


# Samza's pre-revert TestElasticityUtils cases for task "Partition 0_0_2" (offsets 1 < 2 < 3 < 4).
def test_samza_elasticity_utils_case_a() -> None:
    entries = {(1, 0): 1, (2, 0): 4, (4, 0): 2, (4, 2): 3}
    assert resolve_ssp_start(kb(0), 2, entries).start == 4


def test_samza_elasticity_utils_case_b() -> None:
    entries = {(1, 0): 4, (2, 0): 1, (4, 0): 3, (4, 2): 2}
    assert resolve_ssp_start(kb(0), 2, entries).start == 4


def test_samza_elasticity_utils_case_c_min_within_finer_group_wins_over_ancestors() -> None:
    entries = {(1, 0): 1, (2, 0): 2, (4, 0): 3, (4, 2): 4}
    start = resolve_ssp_start(kb(0), 2, entries)
    assert start.start == 3
    assert start.skip_below == (SkipWatermark(P0, 4, 2, 4),)


def test_unrelated_buckets_and_partitions_are_ignored() -> None:
    entries = {BucketKey(P0, 4, 1): 99, BucketKey(SSP("kafka", "in", 1), 1, 0): 77,
               BucketKey(P0, 2, 0): 5}
    start = resolve_task_start([kb(0)], 2, entries)
    assert start.input_offsets == {kb(0): 5}


def test_commits_never_move_offsets_backwards() -> None:
    stored = {BucketKey(P0, 2, 0): 10}
    writes = merge_commit(stored, {BucketKey(P0, 2, 0): 7, BucketKey(P0, 2, 1): 3})
    assert writes == {BucketKey(P0, 2, 1): 3}
    assert merge_commit(stored, {BucketKey(P0, 2, 0): 11}) == {BucketKey(P0, 2, 0): 11}


def test_children_covered_by_a_merged_commit_are_dominated() -> None:
    entries = {BucketKey(P0, 4, 1): 50, BucketKey(P0, 4, 3): 80, BucketKey(P0, 2, 1): 60}
    assert dominated(entries) == [BucketKey(P0, 4, 1)]  # 80 > 60 keeps the faster child


def test_parent_is_dominated_by_all_its_children_together() -> None:
    entries = {BucketKey(P0, 1, 0): 10, BucketKey(P0, 2, 0): 20, BucketKey(P0, 2, 1): 15}
    assert dominated(entries) == [BucketKey(P0, 1, 0)]


def test_equal_entries_do_not_delete_each_other() -> None:
    entries = {BucketKey(P0, 1, 0): 10, BucketKey(P0, 2, 0): 10, BucketKey(P0, 2, 1): 10}
    doomed = dominated(entries)
    remaining = {k: v for k, v in entries.items() if k not in doomed}
    assert remaining == {BucketKey(P0, 1, 0): 10}


FACTORS = [1, 2, 4, 8, 16]
entry_st = st.sampled_from(FACTORS).flatmap(
    lambda f: st.tuples(st.just(f), st.integers(0, f - 1)))
entries_st = st.dictionaries(entry_st, st.integers(0, 1000), max_size=12)


@given(entries_st, st.sampled_from([ResetPolicy.EARLIEST, ResetPolicy.LATEST]))
def test_deleting_dominated_entries_changes_no_resolution(
    raw: dict[tuple[int, int], int], reset: ResetPolicy
) -> None:
    entries = {BucketKey(P0, f, b): o for (f, b), o in raw.items()}
    doomed = set(dominated(entries))
    kept = {k: v for k, v in entries.items() if k not in doomed}
    for f in FACTORS:
        for b in range(f):
            ssp = kb(b) if f > 1 else P0
            before = resolve_task_start([ssp], f, entries, reset)
            after = resolve_task_start([ssp], f, kept, reset)
            assert _effective(before, f, b) == _effective(after, f, b), (f, b)


def _effective(start: TaskStart, f: int, b: int) -> tuple[object, dict[int, object]]:
    """Start offset, and the watermark each finest sub-bucket of (f, b) really gets."""
    (s,) = start.ssps
    per_sub: dict[int, object] = {}
    for sub in range(b, 16, f):
        w: object = s.start
        for wm in s.skip_below:
            if sub % wm.factor == wm.bucket:
                w = wm.offset
        per_sub[sub] = w
    return s.start, per_sub
