"""Empty and hot key buckets (pure): from the per-bucket record counts the workers sample
(the heartbeat stat ``keyBucketCounts``, ``worker.runtime.bucket_counts``), the
partitions whose traffic leaves buckets empty, and the buckets that carry most of their
partition.

* **Empty**: a partition with at least ``min_records`` counted records and a bucket with
  none. Under a hash independent of the producer's partitioner a bucket gets each
  record with probability 1/F, so P(0 of n) = (1 - 1/F)^n, about 1e-125 for n = 1000
  at F = 2: an empty bucket means the key hash is correlated with the partitioner (a
  crc32 job fed by librdkafka's default partitioner), or the partition has very few
  distinct keys. Those buckets' tasks never work: more of them would not help.
* **Hot**: a bucket holding at least ``(1 + 1/F) / 2`` of its partition's counted
  records (3/4 at F = 2, 5/8 at F = 4; its fair share is 1/F): a hot key. Only that
  bucket's task works on it: a higher factor splits the others, never the key.

Each bucket is judged against the records its partition had in the batches its own
reporter counted (``seen``): workers count the buckets they run only (``process_task``),
and two workers sharing a partition counted over different windows. Where several report
a bucket (a handover), the report that saw more of the partition is taken.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MIN_RECORDS = 1000


@dataclass(frozen=True, slots=True)
class PartitionSpread:
    """One partition's counted records per bucket under ``factor`` (None: no report
    counted the bucket), and per bucket the partition's records its reporter saw."""

    system: str
    stream: str
    partition: int
    factor: int
    counts: tuple[int | None, ...]
    seen: tuple[int, ...]

    @property
    def records(self) -> int:
        """The most records of the partition any of its buckets' reporters saw."""
        return max(self.seen, default=0)


@dataclass(frozen=True, slots=True)
class BucketSignals:
    """What the counts show; each list item is JSON-ready (``/status``)."""

    factor: int
    partitions: int  # partitions with enough counted records to judge
    empty: list[dict[str, Any]] = field(default_factory=list)
    hot: list[dict[str, Any]] = field(default_factory=list)

    def advice(self) -> str | None:
        """What to do, in words; None when nothing is wrong."""
        parts = []
        if self.empty:
            buckets = sum(len(e["emptyBuckets"]) for e in self.empty)
            parts.append(
                f"{buckets} key buckets of {len(self.empty)} partitions get no records "
                "although their partitions do: the job's key hash is correlated with the "
                "producer's partitioner (a crc32 job on a confluent-kafka producer's "
                "topic; start a new job, which uses xxhash64) or the partitions have very "
                "few distinct keys; scaling up does not help")
        if self.hot:
            parts.append(
                f"{len(self.hot)} key buckets carry most of their partition's records (a "
                "hot key): only their tasks work on it and scaling up does not split a "
                "key; spread the key (e.g. salt it) or make its work cheaper")
        return "; ".join(parts) or None

    def to_json(self) -> dict[str, Any]:
        return {"factor": self.factor, "partitionsJudged": self.partitions,
                "emptyBuckets": self.empty, "hotBuckets": self.hot, "advice": self.advice()}


def spreads(stats: Mapping[str, Mapping[str, Any]], factor: int) -> list[PartitionSpread]:
    """Each partition's counts under ``factor`` from the processors' heartbeat stats
    (reports under another factor, or malformed ones, are ignored)."""
    best: dict[tuple[str, str, int], dict[int, tuple[int, int]]] = {}
    for s in stats.values():
        report = s.get("keyBucketCounts")
        if not isinstance(report, Mapping) or report.get("factor") != factor:
            continue
        system = str(report.get("system", "kafka"))
        partitions = report.get("partitions")
        seen = report.get("seen")
        if not isinstance(partitions, Mapping):
            continue
        for name, counts in partitions.items():
            stream, _, p = str(name).rpartition("/")
            if not stream or not p.isdigit() or not isinstance(counts, list) \
                    or len(counts) != factor or not all(
                        n is None or (isinstance(n, int) and n >= 0) for n in counts):
                continue
            # (a report without ``seen`` counted every bucket: the sum is what it saw)
            saw = seen.get(name) if isinstance(seen, Mapping) else None
            if not isinstance(saw, int) or saw < 0:
                if None in counts:
                    continue
                saw = sum(counts)
            buckets = best.setdefault((system, stream, int(p)), {})
            for b, n in enumerate(counts):
                if n is not None and (b not in buckets or saw > buckets[b][1]):
                    buckets[b] = (min(n, saw), saw)
    return [PartitionSpread(system, stream, p, factor,
                            tuple(found[b][0] if b in found else None for b in range(factor)),
                            tuple(found[b][1] if b in found else 0 for b in range(factor)))
            for (system, stream, p), found in sorted(best.items())]


def judge(found: list[PartitionSpread], factor: int,
          min_records: int = DEFAULT_MIN_RECORDS) -> BucketSignals:
    """The empty and hot buckets among ``found``: a bucket is judged once its reporter
    saw ``min_records`` of its partition (under factor 1 nothing is)."""
    if factor <= 1:
        return BucketSignals(factor, 0)
    hot_share = (1 + 1 / factor) / 2
    empty, hot = [], []
    judged = 0
    for s in found:
        where = {"system": s.system, "stream": s.stream, "partition": s.partition,
                 "records": s.records}
        ready = [b for b in range(factor)
                 if s.counts[b] is not None and s.seen[b] >= min_records]
        if not ready:
            continue
        judged += 1
        zeros = [b for b in ready if s.counts[b] == 0]
        if zeros:
            empty.append({**where, "emptyBuckets": zeros})
        for b in ready:
            n = s.counts[b] or 0
            if n >= hot_share * s.seen[b]:
                hot.append({**where, "keyBucket": b, "share": round(n / s.seen[b], 3)})
    return BucketSignals(factor, judged, empty, hot)


def bucket_signals(stats: Mapping[str, Mapping[str, Any]], factor: int,
                   min_records: int = DEFAULT_MIN_RECORDS) -> BucketSignals:
    """The signals of the processors' current heartbeat stats under ``factor``."""
    return judge(spreads(stats, factor), factor, min_records)
