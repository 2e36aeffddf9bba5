"""How a partition's records spread over its key buckets: sampled from the batches a
worker reads, reported in its heartbeats (``keyBucketCounts``), judged by the leader
(``coordinator.bucket_signals``: buckets that stay empty, a bucket that carries most of
its partition).

A worker reads whole partitions and filters them to its own buckets in the JVM, so one
batch shows every bucket of each partition it reads, owned or not. At most one batch per
interval is counted (one small Spark aggregation over the batch's rows), only while the
factor is above 1 (under factor 1 a partition is one bucket). The counts add up while
the factor stays; a new factor starts them afresh.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

from worker.plan import QueryPlan

#: a sampled batch's counts: (stream, partition) -> bucket -> records
Counts = dict[tuple[str, int], dict[int, int]]
#: counts a report carries at most (about 16 KiB of JSON): a heartbeat's stats are
#: dropped whole past 64 KiB, and they carry the lags and rates the autosizer needs
MAX_REPORTED_COUNTS = 2048


def count_buckets(batch: DataFrame, plan: QueryPlan) -> Counts:
    """The records of ``batch`` per partition and key bucket under the plan's factor and
    key hash (one Spark job; Kinesis's end-of-shard markers are not records)."""
    rows = batch.where("NOT endOfShard") if plan.system == "kinesis" else batch
    found = (rows.groupBy("topic", "partition", F.expr(plan.bucket_expr()).alias("b"))
             .count().collect())
    out: Counts = {}
    for r in found:
        out.setdefault((str(r["topic"]), int(r["partition"])), {})[int(r["b"])] = int(r["count"])
    return out


class BucketCounts:
    """The counts since the factor last changed, and when the next batch is to be
    counted (``interval_s`` apart; 0: never)."""

    def __init__(self, interval_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._next = 0.0
        self._factor = 0
        self._system = "kafka"
        self._counts: Counts = {}
        self.sampled = 0

    def due(self, factor: int) -> bool:
        """Whether a batch read under ``factor`` is to be counted now."""
        return self._interval_s > 0 and factor > 1 and self._clock() >= self._next

    def add(self, plan: QueryPlan, counts: Mapping[tuple[str, int], Mapping[int, int]]) -> None:
        """Add a counted batch of ``plan``."""
        self._next = self._clock() + self._interval_s
        if plan.factor != self._factor or plan.system != self._system:
            self._factor, self._system, self._counts = plan.factor, plan.system, {}
            self.sampled = 0
        for key, per in counts.items():
            mine = self._counts.setdefault(key, {})
            for bucket, n in per.items():
                mine[bucket] = mine.get(bucket, 0) + n
        self.sampled += 1

    def report(self) -> dict[str, Any] | None:
        """The heartbeat's ``keyBucketCounts``: ``{"factor", "system", "sampledBatches",
        "partitions": {"STREAM/PARTITION": [records of bucket 0, 1, ...]},
        "partitionsLeftOut"}`` (the partitions past ``MAX_REPORTED_COUNTS`` counts); None
        before a counted batch."""
        if not self._counts:
            return None
        f = self._factor
        kept = sorted(self._counts.items())[:max(1, MAX_REPORTED_COUNTS // f)]
        return {"factor": f, "system": self._system, "sampledBatches": self.sampled,
                "partitions": {f"{stream}/{p}": [per.get(b, 0) for b in range(f)]
                               for (stream, p), per in kept},
                "partitionsLeftOut": len(self._counts) - len(kept)}
