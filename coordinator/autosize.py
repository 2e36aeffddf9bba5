"""The autosizer's policy (pure): from a window of samples of the workers' heartbeat stats,
the elasticity factor and processor count the job needs, the reason in words, and the
figures behind it; or that the data is too thin to decide.

Per sample: the backlog (the sum of every task's consumer lag), the processing capacity
(the sum over processors of records/s while a batch runs), the records actually consumed
per second, and how busy the processors are (batch time over the trigger interval). Over
the window: the backlog's trend (least-squares slope, records/s), and the input rate
(consumed rate plus the trend: what arrives, whether or not it is processed).

A backlog that grows, or processors saturated (batches fill the trigger interval) while
the need (``input rate x headroom + backlog / drain target``) exceeds the capacity:
scale up, by the power of two that covers need / capacity (at least one step).
Processors mostly idle with a small backlog: scale down one step. Otherwise keep. The
processor count is recommended too (for the deployment to act on): today's count times
need / capacity up, or times the busy share down.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of the job, at ``at`` seconds."""

    at: float
    backlog: int  # records behind, summed over tasks
    capacity: float  # records/s the processors process while busy, summed
    consumed: float  # records/s actually processed, summed
    busy: float  # 0..1: mean share of the trigger interval spent in batches
    processors: int
    factor: int
    # key buckets that get no records though their partitions do, and buckets carrying
    # most of their partition (``coordinator.bucket_signals``): more tasks would not help
    empty_buckets: int = 0
    hot_buckets: int = 0


@dataclass(frozen=True, slots=True)
class Policy:
    """The autosizer's knobs."""

    min_factor: int = 1
    max_factor: int = 64
    window_s: float = 60.0  # samples older than this are ignored
    min_samples: int = 5
    min_span_s: float = 20.0  # the window must cover at least this much time
    headroom: float = 1.25  # capacity wanted per record/s of input
    drain_target_s: float = 120.0  # a backlog should be gone within this
    saturated: float = 0.9  # busy share from which the batch rate is the capacity
    idle: float = 0.3  # busy share under which one step down is fine
    small_backlog_s: float = 5.0  # a backlog of at most this many seconds of input is small
    growing: float = 1.0  # records/s of backlog growth that count as growing


@dataclass(frozen=True, slots=True)
class Recommendation:
    """What the job needs, and why."""

    elasticity_factor: int
    processors: int
    decided: bool  # False: too little data (the recommendation is the current state)
    reason: str
    figures: dict[str, float] = field(default_factory=dict)


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points (0 for fewer than two distinct x)."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    if var == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in points) / var


def _power_of_two_at_least(x: float) -> int:
    return 1 if x <= 1 else 2 ** math.ceil(math.log2(x))


def _skewed(latest: Sample) -> str:
    why = []
    if latest.empty_buckets:
        why.append(f"{latest.empty_buckets} key buckets get no records though their "
                   "partitions do (the key hash is correlated with the producer's "
                   "partitioner, or too few distinct keys)")
    if latest.hot_buckets:
        why.append(f"{latest.hot_buckets} key buckets carry most of their partition (a hot "
                   "key)")
    return ("scaling up would not help: " + " and ".join(why)
            + "; see /status keyBuckets")


def recommend(samples: Sequence[Sample], policy: Policy) -> Recommendation:
    """The recommendation for the latest sample's job, from the window ending there."""
    if not samples:
        return Recommendation(policy.min_factor, 0, False, "no samples yet")
    latest = samples[-1]
    current = min(max(latest.factor, policy.min_factor), policy.max_factor)
    window = [s for s in samples if s.at > latest.at - policy.window_s]
    span = window[-1].at - window[0].at
    if len(window) < policy.min_samples or span < policy.min_span_s or latest.capacity <= 0:
        return Recommendation(
            current, latest.processors, False,
            f"too little data to decide: {len(window)} samples over {span:.0f}s (need "
            f"{policy.min_samples} over {policy.min_span_s:.0f}s) and a processing rate "
            "from the workers' batches",
            {"samples": len(window), "spanSeconds": round(span, 1)})
    trend = slope([(s.at, float(s.backlog)) for s in window])
    consumed = sum(s.consumed for s in window) / len(window)
    capacity = sum(s.capacity for s in window) / len(window)
    busy = sum(s.busy for s in window) / len(window)
    input_rate = max(0.0, consumed + trend)
    need = input_rate * policy.headroom + latest.backlog / policy.drain_target_s
    ratio = need / capacity
    figures = {"backlog": float(latest.backlog), "backlogTrend": round(trend, 2),
               "inputRate": round(input_rate, 1), "capacity": round(capacity, 1),
               "busy": round(busy, 3), "need": round(need, 1), "ratio": round(ratio, 3),
               "samples": float(len(window)), "spanSeconds": round(span, 1)}
    growing = trend > policy.growing
    # a batch's records/s understates capacity while processors idle between triggers:
    # below saturation the job keeps up by definition, unless the backlog grows
    saturated = busy >= policy.saturated
    if (growing or (saturated and ratio > 1)) and (latest.empty_buckets or latest.hot_buckets):
        return Recommendation(current, latest.processors, True, "keep: " + _skewed(latest)
                              + f"; the job needs {need:,.0f} records/s against a capacity of "
                              f"{capacity:,.0f}", figures)
    if growing or (saturated and ratio > 1):
        step = _power_of_two_at_least(max(ratio, 2.0))
        factor = min(policy.max_factor, current * step)
        processors = max(latest.processors, math.ceil(latest.processors * ratio))
        why = (f"backlog {latest.backlog:,} records and "
               f"{'growing' if growing else 'not shrinking'} ({trend:+.1f}/s), processors "
               f"{busy:.0%} busy; the job needs {need:,.0f} records/s against a capacity of "
               f"{capacity:,.0f}")
        if factor == current:
            why += f"; the factor is at its maximum ({policy.max_factor})"
        return Recommendation(factor, processors, True, "scale up: " + why, figures)
    small = latest.backlog <= max(input_rate, 1.0) * policy.small_backlog_s
    if busy < policy.idle and small and current > policy.min_factor:
        return Recommendation(
            max(policy.min_factor, current // 2),
            max(1, min(latest.processors, math.ceil(latest.processors * busy / policy.idle))),
            True, f"scale down: processors {busy:.0%} busy, backlog {latest.backlog:,} "
                  f"({trend:+.1f}/s)", figures)
    return Recommendation(current, latest.processors, True,
                          f"keep: processors {busy:.0%} busy, backlog {latest.backlog:,} "
                          f"({trend:+.1f}/s), the job needs {need:,.0f} records/s against "
                          f"a capacity of {capacity:,.0f}", figures)
