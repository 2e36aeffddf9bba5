"""Cutting a Kafka batch short: a handover does not wait for the batch in flight to end.

A batch's length trades throughput (its fixed cost, a few tenths of a second of Spark and
Python bookkeeping, is paid once per batch) against how soon a handover can happen (the
batch in flight commits the tasks a worker loses, and the tasks it gains start with the
next batch). Cuts take the second out of the trade: ``process_task`` is called on each
task's rows a piece at a time, and before each piece the Spark task looks whether the
driver cut the batch (a change of the running tasks arrived). If so it stops there and
reports, per task and partition, the offset of the first record it left: the batch
commits each task up to there, and the next batch reads those partitions again from the
furthest-behind task's point (``worker.running.rewound``).

A task's rows are in offset order and one Spark task processes all of them, so what it
processed of a key bucket is always a prefix: committing that prefix is exact. Reports
travel in a Spark accumulator, whose updates Spark applies for the successful attempt of
each task only, once the batch's job is done; a failed attempt's output is a duplicate
past the commit, as with any failure. The signal travels as ``worker.cut_signals`` says:
a file on the driver's disk (``local[N]``), or the driver's HTTP answer (a cluster); on
the driver's disk the reports are written beside it too, since Spark drops an
accumulator update it fails to apply without failing the job.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.accumulators import AccumulatorParam

from worker.cut_signals import forget_reports, is_cut, write_report

#: (batch id, task, topic, partition) -> the offset of the first record the task left
Reports = dict[tuple[int, str, str, int], int]

#: how long a piece of a task's rows should take: a cut waits for the piece in work
PIECE_S = 0.25
#: never fewer records in a piece than this (each call of ``process_task`` has a cost)
MIN_PIECE = 32


class CutReports(AccumulatorParam):  # type: ignore[type-arg]  # (PySpark's, untyped)
    """Merges reports: for one key the lowest offset (one report per key is expected;
    the lowest never claims a record processed that was not)."""

    def zero(self, value: Reports) -> Reports:
        return {}

    def addInPlace(self, a: Reports, b: Reports) -> Reports:  # noqa: N802 (PySpark's API)
        for key, offset in b.items():
            a[key] = min(a.get(key, offset), offset)
        return a


@dataclass(frozen=True)
class CutPlan:
    """What a batch's Spark tasks need to be cut: where the signal is
    (``worker.cut_signals``), how many pieces a task's rows are processed in, and where
    to report."""

    where: str
    batch_id: int
    pieces: int
    reports: Any  # a pyspark Accumulator[Reports]

    def is_cut(self) -> bool:
        """Whether the driver cut this batch (in an executor: a ``stat``, or a request)."""
        return is_cut(self.where, self.batch_id)

    def begin(self, tasks: Iterable[str]) -> None:
        """A Spark task attempt starts on ``tasks``: an earlier attempt's reports of them
        go (a retry reports anew)."""
        forget_reports(self.where, self.batch_id, tasks)

    def report(self, task: str, left: Mapping[tuple[str, int], int]) -> None:
        """``task`` left the records from these offsets (per topic, partition) on."""
        if left:
            write_report(self.where, self.batch_id, task, dict(left))
            self.reports.add({(self.batch_id, task, t, p): int(o)
                              for (t, p), o in left.items()})


def pieces_for(batch_s: float) -> int:
    """Pieces a task's rows of a batch steered to ``batch_s`` are processed in."""
    return max(1, math.ceil(batch_s / PIECE_S))


def piece_bounds(rows: int, pieces: int, minimum: int = MIN_PIECE) -> list[tuple[int, int]]:
    """``[start, end)`` row ranges splitting ``rows`` into at most ``pieces`` pieces of
    at least ``minimum`` rows (the last may be shorter), in order, covering every row."""
    if rows <= 0:
        return []
    size = max(minimum, math.ceil(rows / max(1, pieces)))
    return [(i, min(rows, i + size)) for i in range(0, rows, size)]


def processed_records(ranges: Mapping[tuple[str, int], tuple[int, int]],
                      left: Mapping[tuple[str, str, int], int],
                      tasks: Mapping[tuple[str, int], Iterable[str]]) -> int:
    """About how many records of a batch cut short its tasks processed: per partition
    read ``[from, to)``, its records times the mean share of the range its tasks got
    through (``left``: where each stopped; a task that left nothing got through it
    all). A task's rows are its key bucket's, spread over the range like the rest."""
    done = 0.0
    for (topic, partition), (begin, end) in ranges.items():
        if end <= begin:
            continue
        shares = [(min(end, max(begin, left.get((task, topic, partition), end))) - begin)
                  / (end - begin) for task in tasks.get((topic, partition), ())]
        if shares:
            done += (end - begin) * sum(shares) / len(shares)
    return round(done)


def of_batch(reports: Reports, batch_id: int) -> dict[tuple[str, str, int], int]:
    """Batch ``batch_id``'s reports: (task, topic, partition) -> first offset left."""
    return {(task, t, p): o for (b, task, t, p), o in reports.items() if b == batch_id}
