"""A Kafka batch's tasks reading their own ranges: one Python worker per Spark task.

By the Python source, a batch's rows reach ``process_task`` through two Python workers
per Spark task: the source's reader yields Arrow batches, the JVM turns them into rows,
computes each row's key bucket and task (``QueryPlan.bucket_expr``, ``task_sql``),
filters them (``filter_sql``) and turns the rest into Arrow again for the tasks' runner.
Timed inside both workers on bench/peer.py's job (100 000 records, two Spark tasks, a
quiet 2-core host), the runner got its first row only once the reader had read its whole
range (0.2-0.35 s for 50 000 records), then 0.1-0.2 s later; the tasks ran after that:
the reading, the JVM's conversions and the tasks one after the other, 1.4-1.7 s for a
batch plain Spark reads, runs and writes in ~1.0 s.

When a batch's tasks run where they are read (``task_api.placed_by_reads``: each task's
rows in one Kafka partition, each Kafka partition's range read by one Spark task), the
runner reads the batch's ranges itself, in the same Spark task and the same grouping the
source would have used (:func:`worker.sources.kafka.reads_of`), and computes the key
bucket, the filter and the task name in Python exactly as the batch's SQL does
(:class:`Routes`; a test runs both on the same records). The streaming source still plans
every batch (the offsets, the source plan, the batch size); its own rows are never
computed, as with ``--kafka-reader jvm``.

A batch with fewer Kafka partitions with records than the tasks and cores could use
(F=4 over 2 partitions on 4 cores) was shuffled onto its tasks: two Python workers per
Spark task and a second stage. Its runners split the reads instead (:func:`split_reads`):
a partition's range is read by as many Spark tasks as it gets, each keeping its own share
of the partition's tasks. Every task still runs in one Spark task, its rows in offset
order; the cost is reading the range once per share (the fetch and the key hash), where
the shuffle moved every row through the JVM twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from common.kafka_clients import KafkaClientSettings
from grouping.key_hash import KeyHash, hasher
from worker.plan import QueryPlan, Skip
from worker.runtime.contexts import COLUMNS
from worker.sources.kafka import KafkaRange, KafkaRead, read_range

#: what a partition's starts say: (key bucket or -1 for the whole partition, start, task)
Entry = tuple[int, int, str]


@dataclass(frozen=True)
class Routes:
    """Which of a Kafka partition's records a batch keeps, and for which task: the
    Python form of ``QueryPlan.filter_sql`` and ``task_sql`` (Kafka input)."""

    factor: int
    key_hash: KeyHash
    #: (topic, partition) -> its starts, in the plan's order (the first match names the
    #: task, as the SQL's CASE does)
    entries: tuple[tuple[tuple[str, int], tuple[Entry, ...]], ...]
    skips: tuple[Skip, ...] = ()

    @classmethod
    def of(cls, plan: QueryPlan) -> Routes:
        if plan.system != "kafka":
            raise ValueError(f"tasks read their own ranges of Kafka input, not {plan.system}")
        found: dict[tuple[str, int], list[Entry]] = {}
        for s in plan.starts:
            found.setdefault((s.topic, s.partition), []).append((s.key_bucket, s.start, s.task))
        return cls(plan.factor, plan.key_hash,
                   tuple((k, tuple(v)) for k, v in sorted(found.items())), plan.skips)

    def route(self, topic: str, partition: int, rows: pd.DataFrame,
              tasks: frozenset[str] = frozenset()) -> pd.DataFrame:
        """``rows`` of one Kafka partition (the source's columns) that the batch keeps,
        with their ``keyBucket`` and ``taskName``, in :data:`COLUMNS`' order; only those
        of ``tasks`` when given (a share of a split read)."""
        entries = dict(self.entries).get((topic, partition), ())
        skips = [w for w in self.skips if (w.topic, w.partition) == (topic, partition)]
        if not entries or not len(rows):
            return _routed(rows.iloc[:0], np.zeros(0, np.int64), np.zeros(0, object))
        offsets = rows["offset"].to_numpy(np.int64)
        # the number whose low bits are a record's bucket under any factor: its key's
        # hash, or its offset for a null key (``grouping.key_bucket``; Spark's pmod by a
        # power of two keeps the same low bits of the signed hash)
        h = hasher(self.key_hash)
        raw = np.fromiter((o if k is None else h(k) for k, o in
                           zip(rows["key"].tolist(), offsets.tolist(), strict=True)),
                          np.uint64, len(rows))
        bucket = (raw & np.uint64(self.factor - 1)).astype(np.int64)
        if any(b < 0 for b, _, _ in entries):
            keep = np.ones(len(rows), bool)
        else:
            # a bucket's own start, the last given for it (as ``filter_sql``'s mapping)
            starts = {b: start for b, start, _ in entries}
            keep = np.zeros(len(rows), bool)
            for b, start in starts.items():
                mine = bucket == b
                keep |= mine if start < 0 else mine & (offsets >= start)
        for w in skips:
            keep &= ~(((raw & np.uint64(w.factor - 1)).astype(np.int64) == w.bucket)
                      & (offsets < w.offset))
        task = np.empty(len(rows), object)
        named = np.zeros(len(rows), bool)
        for b, _, name in entries:
            match = ~named & (bucket == b) if b >= 0 else ~named
            task[match] = name
            named |= match
        if tasks:
            keep &= np.isin(task, list(tasks))
        return _routed(rows[keep], bucket[keep], task[keep])


def _routed(rows: pd.DataFrame, bucket: np.ndarray, task: np.ndarray) -> pd.DataFrame:
    out = rows.reset_index(drop=True)
    out["keyBucket"] = bucket
    out["taskName"] = task
    return out[list(COLUMNS)]


@dataclass(frozen=True)
class TaskReads:
    """A batch's reading by its tasks' runners: the source's grouping of its ranges (one
    Spark task each), how to reach the brokers, and the batch's routes."""

    groups: tuple[KafkaRead, ...]
    kafka: KafkaClientSettings
    routes: Routes
    #: the Spark session's time zone: a record's timestamp as PySpark hands it to pandas
    #: (naive, in that zone)
    time_zone: str
    #: per group, the tasks it runs (a split read's share); empty: all of its ranges'
    shares: tuple[frozenset[str], ...] = ()

    @property
    def records(self) -> int:
        """The records its runners read, a split read's range once per share."""
        return sum(r.end - r.start for g in self.groups for r in g.ranges)

    def frames(self, group: int) -> Iterator[pd.DataFrame]:
        """Group ``group``'s records as the batch's rows (:data:`COLUMNS`), a range's
        Arrow batch at a time (in the executor's Python worker)."""
        share = self.shares[group] if self.shares else frozenset()
        for r in self.groups[group].ranges:
            for batch in read_range(self.kafka, r):
                yield self.routes.route(r.topic, r.partition, _frame(batch, self.time_zone),
                                        share)


def split_reads(ranges: Sequence[KafkaRange],
                tasks_of: Mapping[tuple[str, int], Sequence[str]], readers: int
                ) -> tuple[tuple[KafkaRead, ...], tuple[frozenset[str], ...]]:
    """``readers`` Spark tasks over ``ranges`` (one Kafka partition each, each with
    records), when there are more readers than ranges: a range is read by several, each
    running its own share of the partition's tasks (``tasks_of``: the tasks of each
    partition, each task in one). Extra readers go to the range with the most records
    per reader that has tasks to spare; a range's tasks are dealt round its readers.
    Every task is in exactly one share.

    Returns:
        the reads and, for each, its share of tasks.
    """
    keyed = sorted(ranges, key=lambda r: (r.topic, r.partition))
    names = [sorted(set(tasks_of.get((r.topic, r.partition), ()))) for r in keyed]
    split = [1] * len(keyed)
    for _ in range(readers - len(keyed)):
        spare = [i for i, r in enumerate(keyed) if split[i] < len(names[i])]
        if not spare:
            break
        most = max(spare, key=lambda i: ((keyed[i].end - keyed[i].start) / split[i], -i))
        split[most] += 1
    reads: list[KafkaRead] = []
    shares: list[frozenset[str]] = []
    for r, tasks, k in zip(keyed, names, split, strict=True):
        for j in range(k):
            reads.append(KafkaRead((r,)))
            shares.append(frozenset(tasks[j::k]))
    return tuple(reads), tuple(shares)


def _frame(batch: object, time_zone: str) -> pd.DataFrame:
    """An Arrow batch of the source's columns as pandas, with the dtypes PySpark gives
    ``mapInPandas`` for the same Spark columns (a timestamp: naive ``datetime64[ns]`` in
    the session's time zone)."""
    table: pd.DataFrame = batch.to_pandas()  # type: ignore[attr-defined]
    stamps = table["timestamp"]
    if stamps.dt.tz is not None:
        stamps = stamps.dt.tz_convert(time_zone).dt.tz_localize(None)
    table["timestamp"] = stamps.astype("datetime64[ns]")
    return table


__all__ = ["Routes", "TaskReads", "split_reads"]
