"""How a partition's records spread over its key buckets: counted from the batches a
worker runs, reported in its heartbeats (``keyBucketCounts``), judged by the leader
(``coordinator.bucket_signals``: buckets that stay empty, a bucket that carries most of
its partition). Only while the factor is above 1 (under factor 1 a partition is one
bucket). The counts add up while the factor stays; a new factor starts them afresh.

* ``process_task`` workers count every batch as its tasks run: each Spark task adds the
  rows its tasks ran to an accumulator (:class:`TaskRows`), so counting costs no Spark job
  and no second read (rows a cut batch left are counted by the batch that runs them). A
  worker knows the buckets it owns only: the others are reported as unknown (``null``)
  and the leader merges the workers' reports.
* ``process_batch`` workers hand the batch to the user's code: one batch per interval is
  counted by one small Spark aggregation over its rows (:func:`count_buckets`). A worker
  reads whole partitions and filters them to its own buckets in the JVM, so that batch
  shows every bucket of each partition it reads, owned or not.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from pyspark import AccumulatorParam
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (Spark's convention)

from worker.plan import QueryPlan

#: a counted batch's counts: (stream, partition) -> bucket -> records
Counts = dict[tuple[str, int], dict[int, int]]
#: rows per task name, as the Spark tasks counted them
Rows = dict[str, int]
#: counts a report carries at most (about 16 KiB of JSON): a heartbeat's stats are
#: dropped whole past 64 KiB, and they carry the lags and rates the autosizer needs
MAX_REPORTED_COUNTS = 2048


class TaskRows(AccumulatorParam):  # type: ignore[type-arg]  # (PySpark's, untyped)
    """Sums rows per task name over a batch's Spark tasks."""

    def zero(self, value: Rows) -> Rows:
        return {}

    def addInPlace(self, a: Rows, b: Rows) -> Rows:  # noqa: N802 (PySpark's API)
        for task, n in b.items():
            a[task] = a.get(task, 0) + n
        return a


def count_buckets(batch: DataFrame, plan: QueryPlan) -> Counts:
    """The records of ``batch`` per partition and key bucket under the plan's factor and
    key hash, every bucket of each partition with records (one Spark job; Kinesis's
    end-of-shard markers are not records)."""
    rows = batch.where("NOT endOfShard") if plan.system == "kinesis" else batch
    found = (rows.groupBy("topic", "partition", F.expr(plan.bucket_expr()).alias("b"))
             .count().collect())
    out: Counts = {}
    for r in found:
        per = out.setdefault((str(r["topic"]), int(r["partition"])),
                             dict.fromkeys(range(plan.factor), 0))
        per[int(r["b"])] = int(r["count"])
    return out


def owned_counts(plan: QueryPlan, rows: Mapping[str, int],
                 with_records: set[tuple[str, int]]) -> Counts:
    """The counts of the buckets ``plan`` runs, from the rows its tasks counted: a task of
    a partition that had records in the batch (``with_records``) and counted none has an
    empty bucket this batch; buckets of other partitions, or of other workers, are not
    in it."""
    out: Counts = {}
    for s in plan.starts:
        if s.key_bucket < 0 or (s.topic, s.partition) not in with_records:
            continue
        per = out.setdefault((s.topic, s.partition), {})
        per[s.key_bucket] = per.get(s.key_bucket, 0) + int(rows.get(s.task, 0))
    return out


class BucketCounts:
    """The counts since the factor last changed, and whether a batch is to be counted:
    every one when its tasks count (``in_tasks``), else one ``interval_s`` apart
    (0: never, either way)."""

    def __init__(self, interval_s: float, in_tasks: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self.in_tasks = in_tasks
        self._clock = clock
        self._next = 0.0
        self._factor = 0
        self._system = "kafka"
        self._counts: Counts = {}
        self._seen: dict[tuple[str, int], int] = {}
        # per partition, the end of the offsets its ``seen`` counted: a range read again
        # (tasks starting at an older offset than the partition's others, a batch cut
        # short) adds only what lies past it
        self._counted_to: dict[tuple[str, int], int] = {}
        self.sampled = 0

    def due(self, factor: int) -> bool:
        """Whether a batch read under ``factor`` is to be counted now."""
        if self._interval_s <= 0 or factor <= 1:
            return False
        return self.in_tasks or self._clock() >= self._next

    def add(self, plan: QueryPlan, counts: Mapping[tuple[str, int], Mapping[int, int]],
            seen: Mapping[tuple[str, int], int],
            spans: Mapping[tuple[str, int], tuple[int, int]] | None = None) -> None:
        """Add a counted batch of ``plan``: ``counts`` of the buckets counted, ``seen``
        the records each partition had in the batch (the counted buckets' and the
        others'), or, with ``spans`` (the offsets read per partition, ``[from, to)``),
        the offsets not counted before. A partition's range is read again when tasks of
        it start behind its others (their state composed later than the others', a new
        generation) or after a batch cut short: its tasks process each record once, so
        counting the range again would shrink every bucket's share of it (a hot key's
        bucket below the hot share)."""
        self._next = self._clock() + self._interval_s
        if plan.factor != self._factor or plan.system != self._system:
            self._factor, self._system, self._counts, self._seen = (
                plan.factor, plan.system, {}, {})
            self._counted_to = {}
            self.sampled = 0
        for key, per in counts.items():
            mine = self._counts.setdefault(key, {})
            for bucket, n in per.items():
                mine[bucket] = mine.get(bucket, 0) + n
            self._seen[key] = self._seen.get(key, 0) + self._fresh(key, seen, spans)
        self.sampled += 1

    def _fresh(self, key: tuple[str, int], seen: Mapping[tuple[str, int], int],
               spans: Mapping[tuple[str, int], tuple[int, int]] | None) -> int:
        span = None if spans is None else spans.get(key)
        if span is None:
            return int(seen.get(key, 0))
        start, end = span
        if end <= start:
            return 0
        counted_to = self._counted_to.get(key)
        if counted_to is not None:
            start = max(start, counted_to)
            end = max(end, counted_to)
        self._counted_to[key] = end
        return end - start

    def report(self) -> dict[str, Any] | None:
        """The heartbeat's ``keyBucketCounts``: ``{"factor", "system", "sampledBatches",
        "partitions": {"STREAM/PARTITION": [records of bucket 0, 1, ... (null: not
        counted here)]}, "seen": {"STREAM/PARTITION": the partition's records in the
        counted batches}, "partitionsLeftOut"}`` (the partitions past
        ``MAX_REPORTED_COUNTS`` counts); None before a counted batch."""
        if not self._counts:
            return None
        f = self._factor
        kept = sorted(self._counts.items())[:max(1, MAX_REPORTED_COUNTS // f)]
        return {"factor": f, "system": self._system, "sampledBatches": self.sampled,
                "partitions": {f"{stream}/{p}": [per.get(b) for b in range(f)]
                               for (stream, p), per in kept},
                "seen": {f"{stream}/{p}": self._seen.get((stream, p), 0)
                         for (stream, p), _ in kept},
                "partitionsLeftOut": len(self._counts) - len(kept)}
