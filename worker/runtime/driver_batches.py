"""Which Kafka batches of ``process_task`` run in the driver, without a Spark job (pure).

A Spark job whose task runs Python costs ~70-110 ms on a small host before any of its
work (the job, the task's launch, the Python worker's command and the Arrow exchange;
bench/RESULTS.md, #48), and a batch of a few records is nothing but that cost: a record
arriving at an idle worker waited for it, and a one-record batch's trigger took ~165 ms.
A batch whose work in one thread is well under that cost is run by the driver itself:
its tasks' runners read its ranges, call ``process_task`` and write what it returns in
this process, one group of ranges after another (``task_api.run_in_driver``), exactly as
the Spark tasks would have, state and cuts included.

Whether a batch is small enough is measured, not guessed, from the driver's own recent
batches: one of ``r`` records that took ``t`` says a batch of ``n <= r`` takes at most
``t``, and one of ``n > r`` at most ``t * n / r`` (its fixed part scaled too: an
overestimate, never an underestimate of a job whose records cost alike). The tightest of
those bounds over the last :data:`WINDOW` batches decides against :data:`BUDGET_S`. A
batch of more than ``most_records`` never runs there (0: none does). The first batch run
there pays the driver's one-time costs and is not measured; until one is, only batches of
up to :data:`PROBE_RECORDS` run there. A batch of one record always does: Spark could not
spread it over cores either, so the driver is never the slower for it, and its measure
keeps the window current.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: how long a batch may take in the driver: half what the Spark job it saves costs here
BUDGET_S = 0.05
#: the most records a batch run in the driver may hold (``--driver-batch-records``)
MOST_RECORDS = 1000
#: the most records a batch may hold to run in the driver before its cost is measured
PROBE_RECORDS = 100
#: the driver's batches the estimate is taken over (the newest)
WINDOW = 16


@dataclass(frozen=True, slots=True)
class DriverBatches:
    """The policy and what it measured so far."""

    most_records: int = MOST_RECORDS  # 0: no batch runs in the driver
    budget_s: float = BUDGET_S
    warm: bool = False  # a first batch ran in the driver (its one-time costs paid)
    samples: tuple[tuple[int, float], ...] = ()  # (records, seconds), oldest first

    def estimate_s(self, records: int) -> float | None:
        """At most what a batch of ``records`` would take in the driver, from the recent
        batches (None: none measured yet)."""
        if not self.samples:
            return None
        return min(t * max(1.0, records / r) for r, t in self.samples)

    def takes(self, records: int) -> bool:
        """Whether a batch of ``records`` (> 0) runs in the driver."""
        if records <= 0 or records > self.most_records:
            return False
        if records == 1:
            return True
        estimate = self.estimate_s(records)
        if estimate is None:
            return records <= PROBE_RECORDS
        return estimate <= self.budget_s

    def after(self, records: int, seconds: float) -> DriverBatches:
        """Measured: a batch of ``records`` took ``seconds`` in the driver (its reads, the
        tasks and its output)."""
        if records <= 0 or seconds < 0:
            return self
        if not self.warm:
            return replace(self, warm=True)
        return replace(self, samples=(*self.samples, (records, seconds))[-WINDOW:])


__all__ = ["BUDGET_S", "MOST_RECORDS", "PROBE_RECORDS", "WINDOW", "DriverBatches"]
