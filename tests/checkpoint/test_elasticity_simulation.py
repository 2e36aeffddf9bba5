"""A simulator of elastic processing over one partition: random splits and merges, tasks
committing after random amounts of work, crashes that lose uncommitted work, and garbage
collection of dominated entries. Every record is processed at least once; without crashes,
exactly once; per key, processing follows offset order."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from checkpoint.model import BucketKey, ResetPolicy
from checkpoint.resolution import dominated, merge_commit, resolve_ssp_start
from grouping.key_bucket import key_bucket
from grouping.key_hash import DEFAULT_KEY_HASH
from grouping.model import SSP

P0 = SSP("kafka", "in", 0)


@dataclass
class Partition:
    """An input partition: records (key, offset) with offsets 0..n-1."""

    keys: list[bytes | None]

    def bucket(self, offset: int, factor: int) -> int:
        return key_bucket(self.keys[offset], offset, factor, DEFAULT_KEY_HASH)


@dataclass
class Store:
    """The checkpoint store as the coordinator keeps it (monotonic, per key space)."""

    entries: dict[BucketKey, int] = field(default_factory=dict)

    def commit(self, factor: int, bucket: int, offset: int) -> None:
        key = BucketKey(P0, factor, bucket) if factor > 1 else BucketKey(P0, 1, 0)
        self.entries.update(merge_commit(self.entries, {key: offset}))

    def collect_garbage(self) -> None:
        for key in dominated(self.entries):
            del self.entries[key]

    def as_partition_entries(self) -> dict[tuple[int, int], int]:
        return {(k.factor, k.bucket): o for k, o in self.entries.items()}


def run_task(part: Partition, store: Store, factor: int, bucket: int, until: int,
             log: list[tuple[int, int]], phase: int) -> int:
    """Process the task's records below ``until``; return the offset to commit."""
    ssp = P0.with_key_bucket(bucket) if factor > 1 else P0
    start = resolve_ssp_start(ssp, factor, store.as_partition_entries(), ResetPolicy.EARLIEST)
    first = 0 if start.start is ResetPolicy.EARLIEST else int(start.start)
    assert start.start is not ResetPolicy.LATEST
    skips = [(w.factor, w.bucket, w.offset) for w in start.skip_below]
    for offset in range(first, max(first, until)):
        if factor > 1 and part.bucket(offset, factor) != bucket:
            continue
        if any(part.bucket(offset, f) == b and offset < int(o) for f, b, o in skips):
            continue
        log.append((offset, phase))
    return max(first, until)


def simulate(
    rnd: random.Random, crashes: bool, gc: bool
) -> tuple[Partition, list[tuple[int, int]]]:
    n = rnd.randint(1, 300)
    key_space = [None] + [f"k{i}".encode() for i in range(rnd.randint(1, 40))]
    part = Partition([rnd.choice(key_space) for _ in range(n)])
    store = Store()
    log: list[tuple[int, int]] = []
    factor = rnd.choice([1, 2, 4])
    for phase in range(rnd.randint(1, 8)):
        factor = int(min(64, max(1, factor * rnd.choice([1, 2, 2, 4, 0.5, 0.5, 0.25]))))
        for bucket in range(factor):
            until = rnd.randint(0, n)
            commit = run_task(part, store, factor, bucket, until, log, phase)
            if crashes and rnd.random() < 0.3:
                continue  # crashed after processing, before committing
            store.commit(factor, bucket, commit)
        if gc:
            store.collect_garbage()
    # Final phase: everything to the end, no crash.
    factor = int(min(64, max(1, factor * rnd.choice([1, 2, 0.5]))))
    for bucket in range(factor):
        store.commit(factor, bucket, run_task(part, store, factor, bucket, n, log, 999))
    return part, log


def check_order(part: Partition, log: list[tuple[int, int]]) -> None:
    """Per key: after dropping re-processings, offsets strictly increase (log order)."""
    seen: set[int] = set()
    last: dict[object, int] = {}
    for offset, _ in log:
        if offset in seen:
            continue
        seen.add(offset)
        key = part.keys[offset] if part.keys[offset] is not None else ("null", offset)
        assert last.get(key, -1) < offset, f"key {key!r} processed out of order at {offset}"
        last[key] = offset


@given(st.randoms(use_true_random=False), st.booleans())
def test_without_crashes_every_record_is_processed_exactly_once(
    rnd: random.Random, gc: bool
) -> None:
    part, log = simulate(rnd, crashes=False, gc=gc)
    offsets = [o for o, _ in log]
    assert sorted(offsets) == list(range(len(part.keys)))
    check_order(part, log)


@given(st.randoms(use_true_random=False), st.booleans())
def test_with_crashes_every_record_is_processed_at_least_once_in_key_order(
    rnd: random.Random, gc: bool
) -> None:
    part, log = simulate(rnd, crashes=True, gc=gc)
    assert {o for o, _ in log} == set(range(len(part.keys)))
    check_order(part, log)
