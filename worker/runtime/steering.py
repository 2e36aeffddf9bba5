"""A Kafka worker's batch size, steered from the batches it ran (``worker.batch_size``)
and handed to the source: each batch measured as it ends steers the very next one.

A batch's time is its ``foreachBatch`` time plus Spark's part of a trigger (its logs, the
source's planning), measured as the gap between the last batch's end and this one's
start when the two ran back to back. A longer gap is the query idling (nothing to read,
or a handover's wait for its barrier) and the last part measured stands in, or the batch
after every handover would look slow. Measured a batch later (with the gap after it), a
backlog's ramp lost a batch of fixed cost per step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from worker.batch_size import BatchSize, after_batch, after_time_cut

log = logging.getLogger("coxswain.worker")

#: the first batch running gained tasks reads at most this share of the steered limit,
#: and at most :data:`FIRST_BATCH_S` of it: their first output comes at its end
FIRST_BATCH_SHARE = 0.5
FIRST_BATCH_S = 0.5

#: a gap between two batches up to this long (or the trigger's interval, when longer)
#: is Spark's part of a batch (its logs, the source's planning), a longer one the query
#: idling (measured: 80-150 ms on a quiet host, seconds under load)
IDLE_GAP_S = 0.5


class BatchSteering:
    """The steered size (None: not steered, as for Kinesis, whose source has its
    per-shard limit) and the limit issued to the source."""

    def __init__(self, size: BatchSize | None, set_limit: Callable[[int | None], None],
                 trigger_interval_s: float) -> None:
        self.size = size
        self._set_limit = set_limit
        # a longer gap between two batches is the query idling, not Spark's part of it
        self._idle_gap_s = max(trigger_interval_s, IDLE_GAP_S)
        # when the last batch ended, and Spark's part of a trigger last measured
        self._last_end: float | None = None
        self._spark_s = 0.0
        self._warm = False  # the query's first batch (Spark warming up) is not measured
        self.issued: int | None = None  # the limit the source reads under
        if size is not None:
            self.issue(size.limit)

    @property
    def steering_s(self) -> float:
        """The duration batches are steered to (1 s unsteered)."""
        return self.size.steering_s if self.size is not None else 1.0

    @property
    def cut_after_s(self) -> float | None:
        """How long a batch runs before it is cut for running long (None: never)."""
        return self.size.cut_after_s if self.size is not None else None

    def resumed(self) -> None:
        """Tasks gained from a checkpoint start: their first output comes at the end of
        the first batch that runs them, and half a batch gets it there sooner (the next
        one is steered as before). Tasks starting without one (a new job: nobody wrote
        their output before) read their backlog whole instead, as plain Spark's first
        batch does, so this is not called for them."""
        if self.size is not None:
            share = min(FIRST_BATCH_SHARE, FIRST_BATCH_S / self.size.steering_s)
            self.issue(max(1, int(self.size.limit * share)))

    def after(self, records: int, started: float, ended: float,
              read_under: int | None = None) -> None:
        """Steer the next batch's size on this one, read under the limit ``read_under``
        (default: the one issued now; ``records`` 0: not measured, as a batch cut short
        or one the driver ran)."""
        self._measure_gap(started, ended)
        if self.size is None:
            return
        if records > 0:
            if not self._warm:  # the query's first batch: Spark and Python warming up
                self._warm = True
            else:
                seconds = (ended - started) + self._spark_s
                size = after_batch(self.size, records, seconds,
                                   self.issued if read_under is None else read_under)
                if size.limit != self.size.limit:
                    log.debug("batch size %d -> %d records (%d took %.2fs, a batch's fixed "
                              "cost %.2fs)", self.size.limit, size.limit, records, seconds,
                              size.fixed_s)
                self.size = size
        self.issue(self.size.limit)  # (also back from a first batch's half)

    def after_cut_long(self, batch_id: int, processed: int, started: float,
                       ended: float) -> None:
        """Steer the next batch on one cut short for running long, having processed
        about ``processed`` records: what fits in a batch, measured (``after_time_cut``;
        also a query's first batch: without it, the next would read as much again)."""
        self._measure_gap(started, ended)
        if self.size is None:
            return
        warming, self._warm = not self._warm, True
        seconds = (ended - started) + self._spark_s
        size = after_time_cut(self.size, processed, seconds, warming)
        log.info("batch %d: cut after %.1fs for running long, about %d records processed: "
                 "batches of %d records from now", batch_id, ended - started, processed,
                 size.limit)
        self.size = size
        self.issue(size.limit)

    def _measure_gap(self, started: float, ended: float) -> None:
        """Spark's part of a trigger: the gap between the last batch's end and this
        one's start, when they ran back to back."""
        last_end, self._last_end = self._last_end, ended
        if last_end is not None and 0.0 <= started - last_end < self._idle_gap_s:
            self._spark_s = started - last_end

    def query_restarted(self) -> None:
        """A new query runs the batches from now on: its first batch warms Spark up
        again, and no gap before it is Spark's part of a trigger."""
        self._warm = False
        self._last_end = None

    def issue(self, limit: int) -> None:
        """Have the source read at most ``limit`` records from its next batch on."""
        if limit != self.issued:
            self.issued = limit
            self._set_limit(limit)


__all__ = ["FIRST_BATCH_S", "FIRST_BATCH_SHARE", "IDLE_GAP_S", "BatchSteering"]
