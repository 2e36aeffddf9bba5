"""The empty- and hot-bucket signals (``coordinator.bucket_signals``) watched on the
autosizer's sampling interval: exported as gauges, and logged when they change, with what
to do (every replica samples the same leases, so each logs what it sees)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from coordinator.bucket_signals import DEFAULT_MIN_RECORDS, BucketSignals, bucket_signals

log = logging.getLogger("coxswain.buckets")


class BucketWatch:
    """Judges the workers' bucket counts on each :meth:`check`."""

    def __init__(self, stats: Callable[[], Mapping[str, Mapping[str, Any]]],
                 factor: Callable[[], int],
                 on_signals: Callable[[BucketSignals], None] = lambda _: None,
                 min_records: int = DEFAULT_MIN_RECORDS) -> None:
        self._stats = stats
        self._factor = factor
        self._on = on_signals
        self._min_records = min_records
        self._seen: tuple[Any, ...] = ()
        self.latest = BucketSignals(1, 0)

    def now(self) -> BucketSignals:
        """The signals of the current heartbeats (not logged)."""
        return bucket_signals(self._stats(), self._factor(), self._min_records)

    def check(self) -> BucketSignals:
        """The current signals; logged when which buckets are empty or hot changed."""
        found = self.now()
        seen = (found.factor,
                tuple((e["system"], e["stream"], e["partition"], tuple(e["emptyBuckets"]))
                      for e in found.empty),
                tuple((h["system"], h["stream"], h["partition"], h["keyBucket"])
                      for h in found.hot))
        if seen != self._seen:
            advice = found.advice()
            if advice is not None:
                log.warning("key buckets under factor %d: %s (empty: %s; hot: %s)",
                            found.factor, advice,
                            [f"{e['stream']}/{e['partition']}:{e['emptyBuckets']}"
                             for e in found.empty][:10],
                            [f"{h['stream']}/{h['partition']}:{h['keyBucket']} "
                             f"({h['share']:.0%})" for h in found.hot][:10])
            elif self._seen and (self._seen[1] or self._seen[2]):
                log.info("key buckets under factor %d: no empty or hot bucket now",
                         found.factor)
            self._seen = seen
        self.latest = found
        self._on(found)
        return found
