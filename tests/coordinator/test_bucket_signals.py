"""Empty and hot key buckets judged from the workers' sampled counts, the autosizer's
refusal to scale up on them, and the job key hash's choice (pure)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.autosize import Policy, Sample, recommend
from coordinator.bucket_signals import bucket_signals, judge, spreads
from coordinator.lifecycle.job_key_hash import KeyHashChangeRefused, choose_key_hash
from grouping.key_bucket import key_bucket
from grouping.key_hash import KeyHash
from tests.grouping.partitioners import crc32


def _report(factor: int, partitions: dict[str, list[int]]) -> dict[str, Any]:
    return {"keyBucketCounts": {"factor": factor, "system": "kafka", "sampledBatches": 3,
                                "partitions": partitions}}


def _counted(kh: KeyHash, partitions: int, factor: int, keys: list[bytes]
             ) -> dict[str, list[int]]:
    """What workers sampling a topic written by librdkafka's default partitioner count."""
    out = {f"clicks/{p}": [0] * factor for p in range(partitions)}
    for k in keys:
        out[f"clicks/{crc32(k, partitions)}"][key_bucket(k, 0, factor, kh)] += 1
    return out


KEYS = [f"user-{random.Random(7).randrange(10**6)}-{i}".encode() for i in range(8000)]


def test_empty_buckets_fire_for_crc32_on_the_default_partitioner_not_for_xxhash64() -> None:
    old = bucket_signals({"w1": _report(4, _counted(KeyHash.CRC32, 4, 4, KEYS))}, 4)
    assert len(old.empty) == 4 and all(len(e["emptyBuckets"]) == 3 for e in old.empty)
    assert old.advice() is not None and "crc32" in old.advice()  # type: ignore[operator]
    new = bucket_signals({"w1": _report(4, _counted(KeyHash.XXHASH64, 4, 4, KEYS))}, 4)
    assert new.empty == [] and new.hot == [] and new.partitions == 4
    assert new.advice() is None


def test_a_single_hot_key_fires_the_hot_signal() -> None:
    keys = [*KEYS[:2000], *[b"celebrity"] * 6000]
    found = bucket_signals({"w1": _report(4, _counted(KeyHash.XXHASH64, 1, 4, keys))}, 4)
    assert [h["keyBucket"] for h in found.hot] == [key_bucket(b"celebrity", 0, 4,
                                                              KeyHash.XXHASH64)]
    assert found.hot[0]["share"] > 0.75 and found.empty == []


def test_too_few_records_other_factors_and_bad_reports_are_not_judged() -> None:
    stats: dict[str, dict[str, Any]] = {
        "w1": _report(4, {"clicks/0": [999, 0, 0, 0]}),  # under min_records
        "w2": _report(2, {"clicks/1": [5000, 0]}),  # another factor's report
        "w3": _report(4, {"clicks/2": [1, 2]}),  # malformed
        "w4": {"keyBucketCounts": "nonsense"}, "w5": {}}
    found = bucket_signals(stats, 4)
    assert found.partitions == 0 and found.empty == [] and found.hot == []
    assert bucket_signals(stats, 1).partitions == 0


def test_the_fuller_report_of_a_partition_read_by_two_workers_wins() -> None:
    stats = {"w1": _report(2, {"t/0": [10, 0]}), "w2": _report(2, {"t/0": [900, 800]})}
    assert [s.counts for s in spreads(stats, 2)] == [(900, 800)]
    assert judge(spreads(stats, 2), 2).empty == []


def _owned(factor: int, partitions: dict[str, list[int | None]], seen: dict[str, int]
           ) -> dict[str, Any]:
    """A ``process_task`` worker's report: the buckets it runs, and what it saw."""
    report = _report(factor, partitions)  # type: ignore[arg-type]
    report["keyBucketCounts"]["seen"] = seen
    return report


def test_workers_sharing_a_partition_are_merged_bucket_by_bucket() -> None:
    """Each worker counts the buckets it runs; each bucket is judged against what its
    own worker saw of the partition."""
    stats = {"w1": _owned(4, {"t/0": [0, 700, None, None]}, {"t/0": 1400}),
             "w2": _owned(4, {"t/0": [None, None, 650, 0]}, {"t/0": 1300})}
    [spread] = spreads(stats, 4)
    assert spread.counts == (0, 700, 650, 0) and spread.seen == (1400, 1400, 1300, 1300)
    found = judge([spread], 4)
    assert found.empty[0]["emptyBuckets"] == [0, 3] and found.hot == []


def test_a_bucket_whose_worker_saw_little_is_not_judged() -> None:
    """A worker that just got bucket 3 has seen 20 of the partition's records and none
    of them in its bucket: not empty, though the other worker saw thousands."""
    stats = {"w1": _owned(4, {"t/0": [1000, 1000, 1000, None]}, {"t/0": 4000}),
             "w2": _owned(4, {"t/0": [None, None, None, 0]}, {"t/0": 20})}
    found = judge(spreads(stats, 4), 4)
    assert found.partitions == 1 and found.empty == [] and found.hot == []
    # a handover: the bucket's report that saw more of the partition is taken
    stats["w3"] = _owned(4, {"t/0": [None, None, None, 900]}, {"t/0": 3900})
    assert [s.counts for s in spreads(stats, 4)] == [(1000, 1000, 1000, 900)]


def test_a_hot_bucket_is_judged_against_its_own_workers_window() -> None:
    stats = {"w1": _owned(2, {"t/0": [9000, None]}, {"t/0": 10000}),
             "w2": _owned(2, {"t/0": [None, 100]}, {"t/0": 1000})}
    found = judge(spreads(stats, 2), 2)
    assert [(h["keyBucket"], h["share"]) for h in found.hot] == [(0, 0.9)]


@given(st.sampled_from([2, 4, 8, 16]), st.integers(1000, 5000), st.integers(0, 2**32))
def test_a_uniform_spread_is_never_flagged(factor: int, n: int, seed: int) -> None:
    rng = random.Random(seed)  # (hypothesis's own randoms may be degenerate streams)
    counts = [0] * factor
    for _ in range(n):
        counts[rng.randrange(factor)] += 1
    found = judge(spreads({"w": _report(factor, {"t/0": counts})}, factor), factor)
    assert found.empty == [] and found.hot == []


def _samples(empty: int, hot: int) -> list[Sample]:
    # a growing backlog on saturated processors: scale up, unless buckets say otherwise
    return [Sample(float(t), 1000 * t, 100.0, 100.0, 1.0, 2, 4, empty, hot)
            for t in range(0, 60, 5)]


@pytest.mark.parametrize(("empty", "hot", "verdict"), [
    (0, 0, "scale up"), (12, 0, "keep: scaling up would not help: 12 key buckets"),
    (0, 1, "keep: scaling up would not help: 1 key buckets carry")])
def test_the_autosizer_does_not_scale_up_on_empty_or_hot_buckets(
        empty: int, hot: int, verdict: str) -> None:
    found = recommend(_samples(empty, hot), Policy())
    assert found.reason.startswith(verdict), found.reason
    assert (found.elasticity_factor > 4) == (verdict == "scale up")


def _none() -> int:
    raise AssertionError("counted although nothing changes")


@pytest.mark.parametrize(("desired", "latest", "configured", "expected"), [
    ({}, None, None, KeyHash.XXHASH64),  # a new job
    ({}, None, KeyHash.CRC32, KeyHash.CRC32),  # a new job, told
    ({}, {"elasticityFactor": 2}, None, KeyHash.CRC32),  # models of the previous release
    ({}, {"keyHash": "xxhash64"}, None, KeyHash.XXHASH64),
    ({"keyHash": "crc32"}, {"keyHash": "crc32"}, KeyHash.CRC32, KeyHash.CRC32),
])
def test_the_job_keeps_its_key_hash(desired: dict[str, Any], latest: dict[str, Any] | None,
                                    configured: KeyHash | None, expected: KeyHash) -> None:
    assert choose_key_hash(desired, latest, configured, _none) is expected


def test_a_change_is_refused_only_while_history_depends_on_it() -> None:
    count: Callable[[], int] = lambda: 7  # noqa: E731
    with pytest.raises(KeyHashChangeRefused, match="crc32 and 7 key-bucket"):
        choose_key_hash({}, {"elasticityFactor": 2}, KeyHash.XXHASH64, count)
    assert choose_key_hash({"keyHash": "crc32"}, None, KeyHash.XXHASH64,
                           lambda: 0) is KeyHash.XXHASH64
