"""How many records a worker's next micro-batch reads (pure).

A handover waits for the batch in flight: its tasks' last commit comes at its end. So a
batch's duration bounds how fast a worker gives tasks up, and the first batch after a
change is when its new tasks first produce output. A fixed cap in records cannot bound
that duration (a record's cost is the user's), so the worker measures: while batches are
full (the source had more than the limit), it steers the limit toward ``target_s`` of
processing per batch; batches the source could not fill only ever raise it (a quiet
stream says nothing about the cost of a full batch). The steering step is the geometric
mean of the limit and the measured estimate, which converges without overshooting on
the usual ``a + b * records`` cost of a batch. The user's ``--max-offsets-per-trigger``
stays the ceiling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

#: the default batch duration targets: ``--api task`` batches are cut short by a change
#: (a long batch costs a handover little and pays the fixed cost less often); an
#: ``--api batch`` batch is one call of the user's function and cannot be, so a
#: handover waits for it whole
TARGET_CUT_S = 8.0
TARGET_WHOLE_S = 1.0


def default_target_s(api: str) -> float:
    """The batch duration to steer toward when the user gave none, by ``--api``."""
    return TARGET_CUT_S if api == "task" else TARGET_WHOLE_S


#: the first batch's records when the user set no ceiling (raised or lowered from there)
FIRST_LIMIT = 1000
#: the same for batches cut short by time (``--api task``): a backlog's first batch reads
#: up to this many records at once and is cut at its steered duration
#: (:data:`TIME_CUT_SHARE`), so its size costs no wait; it then measures what fits in a
#: batch, where a probe of :data:`FIRST_LIMIT` ramped up over several batches, paying a
#: batch's fixed cost each (bench/peer.py: 4 batches for a backlog of 100 000)
FIRST_TIMED_LIMIT = 100_000
#: a batch whose tasks can be cut (``worker.cuts``) is cut once it ran this share of its
#: steered duration: an outlier or a first batch never runs far over it
TIME_CUT_SHARE = 1.25
#: a batch with at least this share of the limit counts as full
FULL = 0.9
#: full batches remembered for the fit of a batch's fixed cost
WINDOW = 24
#: a batch's fixed cost may take at most this share of it: a batch is never steered
#: shorter than its fixed cost over this share (shorter batches would trade throughput
#: away for little: a batch cannot end sooner than its fixed cost). A half keeps at least
#: the efficiency a fixed record cap gave on bench/handover's job (1.6 s of work in a
#: 2.6 s batch) at the default target
MAX_FIXED_SHARE = 0.5
#: one batch changes the limit by at most this factor either way (one outlier, a pause
#: or a burst, moves it little)
MAX_STEP = 2.0
#: a full batch that took less than this share of the steered duration is far from it
#: (a backlog's first batches): the limit grows straight to the estimate, by at most
#: :data:`MAX_GROWTH`. The estimate counts the batch's fixed cost as its records' cost,
#: so on ``a + b * records`` it is at most the right size: no overshoot to damp. Doubling
#: from the first limit took 9 batches of ~0.5 s fixed cost each to reach an 8 s batch
#: of a 0-work job (bench/peer.py); this takes 4
RAMP_SHARE = 0.5
MAX_GROWTH = 8.0


@dataclass(frozen=True, slots=True)
class BatchSize:
    """The next batch's record limit, steered toward ``target_s`` per batch."""

    target_s: float
    ceiling: int | None = None  # the user's limit: never above it
    limit: int = FIRST_LIMIT
    samples: tuple[tuple[int, float], ...] = ()  # recent full batches: (records, seconds)
    fixed_s: float = 0.0  # a batch's fixed cost, fitted on ``samples``
    timed_cuts: bool = False  # whether a batch running long is cut (``cut_after_s``)

    def __post_init__(self) -> None:
        if not self.target_s > 0:
            raise ValueError(f"a batch's target duration must be positive: {self.target_s}")
        if self.ceiling is not None and self.ceiling < 1:
            raise ValueError(f"a batch's ceiling must be at least 1 record: {self.ceiling}")

    @property
    def steering_s(self) -> float:
        """The duration batches are steered to: the target, or longer when a batch's
        fixed cost would otherwise take more than :data:`MAX_FIXED_SHARE` of it."""
        return max(self.target_s, self.fixed_s / MAX_FIXED_SHARE)

    @property
    def cut_after_s(self) -> float | None:
        """When a batch running long is cut short (None: batches are not cut by time)."""
        return TIME_CUT_SHARE * self.steering_s if self.timed_cuts else None


def start(target_s: float, ceiling: int | None, timed_cuts: bool = False) -> BatchSize:
    """The first batch's size: :data:`FIRST_LIMIT`, or the ceiling when lower (a high
    ceiling is where the limit may grow to, not where it starts: a first batch of a
    million records would hold every change up for as long as it runs). With
    ``timed_cuts`` (batches cut short at :attr:`BatchSize.cut_after_s`) a first batch
    cannot run long: it starts at :data:`FIRST_TIMED_LIMIT`."""
    first = FIRST_TIMED_LIMIT if timed_cuts else FIRST_LIMIT
    if ceiling is not None:
        first = min(ceiling, first)
    return BatchSize(target_s, ceiling, first, timed_cuts=timed_cuts)


def after_time_cut(size: BatchSize, processed: int, seconds: float,
                   warming: bool = False) -> BatchSize:
    """The size after a batch was cut short for running long, having processed about
    ``processed`` of its records in ``seconds``: a direct measure of what fits in the
    steered duration, taken as it is (the limit was too high by more than
    :data:`TIME_CUT_SHARE`: a damped step down would cut batch after batch). It is
    proportional: the next batch may run over by a fifth of the fixed cost, and the
    usual steering takes over from there. Not a sample of the fixed cost's fit.

    ``warming``: the query's first batch, whose time holds Spark's warm-up (seconds of
    Python workers starting, the app's imports): what it processed fits in a batch at
    least, and the usual ramp grows the limit from there."""
    if processed < 0 or seconds <= 0 or not math.isfinite(seconds):
        return size
    if processed == 0:  # cut before its tasks got through a record (reading took it all)
        limit = max(1, round(size.limit / MAX_GROWTH))
    else:
        limit = max(1, round(processed * size.steering_s / seconds))
        if warming:
            limit = max(limit, processed)
    limit = min(limit, size.limit)  # it ran long at this limit: never above it
    if size.ceiling is not None:
        limit = min(limit, size.ceiling)
    return replace(size, limit=limit)


def fixed_cost(samples: tuple[tuple[int, float], ...]) -> float | None:
    """A batch's fixed cost ``a`` in ``seconds = a + b * records``, fitted by least
    squares on ``samples``; None when their sizes are too alike to tell (or the fit
    says records cost nothing)."""
    if len(samples) < 3:
        return None
    xs = [float(n) for n, _ in samples]
    ys = [s for _, s in samples]
    if max(xs) < 1.25 * min(xs):
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    if b <= 0:
        return None
    # never more than the fastest batch took, never negative
    return min(max(0.0, my - b * mx), *ys)


def after_batch(size: BatchSize, records: int, seconds: float,
                read_under: int | None = None) -> BatchSize:
    """The size after a batch of ``records`` took ``seconds``, read under the limit
    ``read_under`` (default: the current one; a batch is measured once the next one
    started, which a new limit may already steer)."""
    if records <= 0 or seconds <= 0 or not math.isfinite(seconds):
        return size
    full = records >= FULL * (size.limit if read_under is None else read_under)
    samples = (*size.samples, (records, seconds))[-WINDOW:] if full else size.samples
    fitted = fixed_cost(samples)
    fixed = size.fixed_s if fitted is None else fitted
    steering = max(size.target_s, fixed / MAX_FIXED_SHARE)
    estimate = records * steering / seconds
    if full and seconds < RAMP_SHARE * steering and estimate > size.limit:
        wanted = min(estimate, size.limit * MAX_GROWTH)  # far below: straight there
    else:
        wanted = math.sqrt(size.limit * estimate)
        if not full:  # a batch the source could not fill: only evidence for bigger ones
            wanted = max(size.limit, wanted)
        wanted = min(max(wanted, size.limit / MAX_STEP), size.limit * MAX_STEP)
    limit = max(1, round(wanted))
    if limit == size.limit and abs(estimate - limit) > 0.5 and (full or estimate > limit):
        # the damped step rounds back to the same few records, short of the estimate:
        # one record toward it (else a batch of a few costly records stalls a record or
        # two off its duration)
        limit = max(1, limit + (1 if estimate > limit else -1))
    if size.ceiling is not None:
        limit = min(limit, size.ceiling)
    return replace(size, limit=limit, samples=samples, fixed_s=fixed)
