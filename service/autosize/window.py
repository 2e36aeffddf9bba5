"""The autosizer's window: samples of the workers' heartbeat stats taken on an interval by
every replica (they all read the same leases), and the recommendation of
``coordinator.autosize`` over them, exported as Prometheus gauges for a deployment's
autoscaler (a Kubernetes HPA on ``coxswain_recommended_processors``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from coordinator.autosize import Policy, Recommendation, Sample, recommend
from coordinator.bucket_signals import BucketSignals

log = logging.getLogger("coxswain.autosize")
DEFAULT_TRIGGER_S = 0.5  # a worker's trigger interval when its stats do not say


def sample_of(stats: Mapping[str, Mapping[str, Any]], processors: int, factor: int,
              at: float, buckets: BucketSignals | None = None) -> Sample:
    """A sample from each processor's last heartbeat stats (and the bucket signals
    judged from them)."""
    backlog = capacity = consumed = busy_sum = 0.0
    reporting = 0
    for s in stats.values():
        rate = _number(s.get("recordsPerSecond"))
        batch = _number(s.get("batchSeconds"))
        trigger = _number(s.get("triggerSeconds")) or DEFAULT_TRIGGER_S
        lags = s.get("consumerLag")
        if isinstance(lags, Mapping):
            backlog += sum(max(0.0, _number(v)) for v in lags.values())
        reported = s.get("busy")
        if isinstance(reported, int | float) and not isinstance(reported, bool):
            busy = min(1.0, max(0.0, float(reported)))  # measured over recent time
        elif batch > 0:
            busy = min(1.0, batch / trigger)  # the last batch's only
        else:
            continue
        reporting += 1
        capacity += rate
        consumed += rate * busy
        busy_sum += busy
    empty = sum(len(e["emptyBuckets"]) for e in buckets.empty) if buckets else 0
    return Sample(at, int(backlog), capacity, consumed,
                  busy_sum / reporting if reporting else 0.0, processors, factor,
                  empty, len(buckets.hot) if buckets else 0)


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else 0.0


class Autosizer:
    """Keeps the window of samples and the latest recommendation."""

    def __init__(self, read: Callable[[], Sample], policy: Policy,
                 on_recommendation: Callable[[Recommendation], None] | None = None,
                 interval_s: float = 5.0) -> None:
        self._read = read
        self.policy = policy
        self._on = on_recommendation
        self.interval_s = interval_s
        self._samples: deque[Sample] = deque()
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> Recommendation:
        """Take a sample now; the recommendation over the window."""
        s = self._read()
        self._samples.append(s)
        while self._samples and self._samples[0].at <= s.at - self.policy.window_s:
            self._samples.popleft()
        found = self.recommendation(self.policy)
        if self._on is not None and found.decided:  # the gauges: the default policy's
            self._on(found)
        return found

    def recommendation(self, policy: Policy) -> Recommendation:
        """The recommendation over the current window, under ``policy``."""
        return recommend(list(self._samples), policy)

    @property
    def samples(self) -> int:
        """Samples in the window."""
        return len(self._samples)

    def start(self) -> None:
        """Sample every ``interval_s`` in the background."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop sampling."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # a bad sample must not end the sampling
                log.exception("autosize sample failed")
            await asyncio.sleep(self.interval_s)

