"""Cutting the Kafka batch in flight short (``worker.cuts``): for a change of the running
tasks, so a handover waits for a piece of a task's rows rather than the whole batch, or
for running past its steered duration (``BatchSize.cut_after_s``). The driver signals
the cut (``worker.cut_signals``); each task reports the first offset it left, through an
accumulator and beside the signal, and the batch commits each task up to there."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

from worker.cut_signals import CutSignals, Left
from worker.cuts import CutPlan, CutReports, of_batch, pieces_for

log = logging.getLogger("coxswain.worker")


class BatchCuts:
    """The batch that can be cut now, why each batch was cut, and the reports."""

    def __init__(self, spark: SparkSession, signals: CutSignals | None) -> None:
        self._spark = spark
        self._signals = signals  # None: the worker has no channel for signals
        self._cuttable: int | None = None
        # the batches cut for a change, and for running long: only the latter measure
        # what fits in a batch
        self._for_change: int | None = None
        self._for_time: int | None = None
        self._lock = threading.Lock()
        self._reports: Any = None  # the accumulator, made with the first cuttable batch
        self.count = 0  # batches cut short so far

    def cut(self) -> None:
        """Cut the batch in flight short for a change, if it can be (its tasks stop
        before their next piece of rows; what they did is committed)."""
        with self._lock:
            if self._cuttable is None or self._signals is None:
                return
            self._for_change = self._cuttable
            try:
                self._signals.cut(self._cuttable)
            except OSError as e:  # the batch then ends as it would have
                log.warning("batch %d: not cut (%s)", self._cuttable, e)

    def cut_long(self, batch_id: int) -> None:
        """Cut batch ``batch_id`` short for running past its steered duration (a timer's
        thread; nothing when the batch is over)."""
        with self._lock:
            if self._cuttable != batch_id or self._signals is None:
                return
            self._for_time = batch_id
            try:
                self._signals.cut(batch_id)
            except OSError as e:
                log.warning("batch %d: not cut (%s)", batch_id, e)

    def plan(self, batch_id: int, batch_s: float, stale: Callable[[], bool]
             ) -> CutPlan | None:
        """Batch ``batch_id``'s cut plan for batches steered to ``batch_s`` (None: no
        channel for signals). A ``stale`` batch (planned before a change of the running
        tasks, or starting while one waits for it) is cut as it starts: a change queued
        before the batch was cuttable found no batch to cut, so the batch looks for it,
        once cuttable (a change queued after that cuts it itself)."""
        if self._signals is None:
            return None
        if self._reports is None:
            self._reports = self._spark.sparkContext.accumulator({}, CutReports())
        with self._lock:
            self._cuttable = batch_id
            # (a restarted query runs a batch id again: no earlier cut of it counts)
            self._for_change = self._for_time = None
        if stale():
            self.cut()
        return CutPlan(self._signals.where, batch_id, pieces_for(batch_s), self._reports)

    def end(self, batch_id: int) -> Left | None:
        """Batch ``batch_id`` is over: nothing cuts it any more. Returns the reports its
        tasks left beside the signal (None: the channel carries none)."""
        assert self._signals is not None
        with self._lock:
            self._cuttable = None
            try:
                return self._signals.reports(batch_id)
            finally:
                self._signals.clear(batch_id)

    def left(self, batch_id: int, beside: Left | None) -> Left:
        """What the tasks of batch ``batch_id`` (ended, whole) left: (task, topic,
        partition) -> first offset, from the accumulator and ``beside`` (:meth:`end`).
        Spark drops an accumulator update it fails to apply (it logs it), and a task
        committed whole past records it left would lose them, so where the two differ
        each task is committed to the lower."""
        left = of_batch(self._reports.value, batch_id)
        if beside is not None and beside != left:
            log.error("batch %d: the cut reports of the accumulator (%s) and of the "
                      "signals' folder (%s) differ; each task is committed to the lowest",
                      batch_id, left, beside)
            for spot, offset in beside.items():
                left[spot] = min(left.get(spot, offset), offset)
        if left:
            self._reports.value = {}
            self.count += 1
            log.info("batch %d: cut short, %d tasks left records for the next batch",
                     batch_id, len({k[0] for k in left}))
        return left

    def for_time(self, batch_id: int) -> bool:
        """Whether batch ``batch_id`` was cut for running long alone (not for a change)."""
        return self._for_time == batch_id and self._for_change != batch_id


__all__ = ["BatchCuts"]
