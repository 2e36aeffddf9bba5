"""Checkpoint resolution across elasticity changes (the rule of DESIGN.md), and domination.

Entries are kept per key space (partition, factor F, bucket b) with offset o: "every record
of the partition whose key bucket under F is b, with offset < o, has been processed". For a
task's SSPKb T = (partition, b_T, F_T):

* F* = the largest factor among F_T and the entries overlapping T;
* for each sub-bucket s of T under F*, w(s) = the largest offset of the entries containing s
  (ancestors and descendants both count); no entry: the reset policy;
* T starts at min over s of w(s), and skips records of sub-bucket s below w(s).

So a split child starts exactly at its parent's watermark, and a merged task starts at its
slowest child and skips what faster children already did: no loss, no duplicates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from checkpoint.model import (
    BucketKey,
    ResetPolicy,
    SkipWatermark,
    SspStart,
    StartOffset,
    offset_sort_key,
)
from grouping.key_bucket import contains, overlaps
from grouping.model import SystemStreamPartition

#: Entries of one partition: (factor, bucket) -> offset.
PartitionEntries = Mapping[tuple[int, int], int]


def resolve_ssp_start(
    ssp: SystemStreamPartition,
    factor: int,
    entries: PartitionEntries,
    reset: ResetPolicy = ResetPolicy.EARLIEST,
) -> SspStart:
    """Start offset and skip watermarks of one SSP(Kb) of a task grouped with ``factor``.

    ``entries`` are the stored entries of ``ssp``'s partition. An SSP without a key bucket
    covers the whole partition (factor 1, bucket 0) whatever ``factor`` is.
    """
    key = BucketKey.of_ssp(ssp, factor)
    f_t, b_t = key.factor, key.bucket
    relevant = [
        (f_e, b_e, o)
        for (f_e, b_e), o in entries.items()
        if overlaps(b_t, f_t, b_e, f_e)
    ]
    if not relevant:
        return SspStart(ssp, reset)
    f_star = max(f_t, *(f for f, _, _ in relevant))
    watermarks: list[tuple[int, StartOffset]] = []
    for s in range(b_t, f_star, f_t):
        best: int | None = None
        for f_e, b_e, o in relevant:
            if contains(b_e, f_e, s, f_star) and (best is None or o > best):
                best = o
        watermarks.append((s, reset if best is None else best))
    start = min((w for _, w in watermarks), key=offset_sort_key)
    skip = tuple(
        SkipWatermark(key.ssp, f_star, s, w)
        for s, w in watermarks
        if offset_sort_key(w) > offset_sort_key(start)
    )
    return SspStart(ssp, start, skip)


@dataclass(frozen=True, slots=True)
class TaskStart:
    """Where a task starts: one :class:`SspStart` per SSP(Kb) of the task."""

    ssps: tuple[SspStart, ...]

    @property
    def input_offsets(self) -> dict[SystemStreamPartition, StartOffset]:
        """SSP(Kb) -> start offset."""
        return {s.ssp: s.start for s in self.ssps}

    @property
    def skip_below(self) -> tuple[SkipWatermark, ...]:
        """Every skip watermark of the task."""
        return tuple(w for s in self.ssps for w in s.skip_below)


def resolve_task_start(
    ssps: Iterable[SystemStreamPartition],
    factor: int,
    entries: Mapping[BucketKey, int],
    reset: ResetPolicy = ResetPolicy.EARLIEST,
) -> TaskStart:
    """Resolve every SSP(Kb) of a task against all stored ``entries``."""
    by_partition = entries_by_partition(entries)
    return TaskStart(tuple(
        resolve_ssp_start(ssp, factor, by_partition.get(ssp.whole(), {}), reset)
        for ssp in sorted(ssps)
    ))


def entries_by_partition(
    entries: Mapping[BucketKey, int],
) -> dict[SystemStreamPartition, dict[tuple[int, int], int]]:
    """Group entries by partition: partition -> (factor, bucket) -> offset."""
    out: dict[SystemStreamPartition, dict[tuple[int, int], int]] = {}
    for key, offset in entries.items():
        out.setdefault(key.ssp, {})[(key.factor, key.bucket)] = offset
    return out


def merge_commit(
    stored: Mapping[BucketKey, int], committed: Mapping[BucketKey, int]
) -> dict[BucketKey, int]:
    """The entries a commit writes: offsets never move backwards (max of old and new)."""
    return {
        key: max(offset, stored.get(key, offset))
        for key, offset in committed.items()
        if offset > stored.get(key, -1)
    }


def dominated(entries: Mapping[BucketKey, int]) -> list[BucketKey]:
    """Entries that may be deleted without changing any resolution.

    An entry is dominated when, for every sub-bucket of its key space, the other remaining
    entries already guarantee an offset at least as large (one covering entry, or finer
    entries together). Finest entries are considered first, and each deletion is taken into
    account before the next check, so two entries never delete each other.
    """
    doomed: list[BucketKey] = []
    for ssp, part in sorted(entries_by_partition(entries).items()):
        remaining = dict(part)
        for (f, b) in sorted(part, key=lambda fb: (-fb[0], fb[1])):
            o = remaining.pop((f, b))
            f_star = max(f, *(fe for fe, be in remaining if overlaps(b, f, be, fe)), 1)
            covered = all(
                any(contains(be, fe, s, f_star) and oe >= o for (fe, be), oe in remaining.items())
                for s in range(b, f_star, f)
            ) if remaining else False
            if covered:
                doomed.append(BucketKey(ssp, f, b))
            else:
                remaining[(f, b)] = o
    return doomed
