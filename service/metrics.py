"""Prometheus metrics of one app instance (its own registry: no process globals)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from coordinator.bucket_signals import BucketSignals

TaskLags = Callable[[], Mapping[str, Mapping[str, int]]]
Stats = Callable[[], Mapping[str, Mapping[str, Any]]]
KnownTasks = Callable[[], AbstractSet[str]]


class Metrics:
    """The metrics of API.md plus SEP-32's checkpoint-compute time."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.generation_seconds = Histogram(
            "coxswain_job_model_generation_seconds", "Time to generate a job model",
            registry=r, buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.task_count = Gauge("coxswain_task_count", "Active tasks in the latest job model",
                                registry=r)
        self.processors = Gauge("coxswain_processors", "Registered processors", registry=r)
        self.rebalances = Counter("coxswain_rebalances", "Job models generated, by reason",
                                  ["reason"], registry=r)
        self.barrier_seconds = Histogram(
            "coxswain_barrier_wait_seconds", "Time from publication to barrier end",
            ["state"], registry=r, buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120))
        self.checkpoint_commits = Counter(
            "coxswain_checkpoint_commits", "Checkpoint commits accepted", registry=r)
        self.checkpoint_buckets = Counter(
            "coxswain_checkpoint_bucket_entries", "Bucket entries written by commits",
            registry=r)
        self.fenced_commits = Counter(
            "coxswain_fenced_commits", "Checkpoint commits refused by fencing", registry=r)
        self.checkpoint_compute_seconds = Histogram(
            "coxswain_checkpoint_compute_seconds",
            "Time to resolve checkpoints across elasticity changes (SEP-32 checkpoint-compute)",
            registry=r, buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1))
        self.recommended_factor = Gauge(
            "coxswain_recommended_elasticity_factor",
            "The autosizer's recommended elasticity factor (GET /autosize)", registry=r)
        self.recommended_processors = Gauge(
            "coxswain_recommended_processors",
            "The autosizer's recommended processor count (GET /autosize)", registry=r)
        self.empty_key_buckets = Gauge(
            "coxswain_empty_key_buckets",
            "Key buckets with no records though their partition had enough to judge "
            "(GET /status keyBuckets)", registry=r)
        self.hot_key_buckets = Gauge(
            "coxswain_hot_key_buckets",
            "Key buckets carrying most of their partition's records (a hot key)", registry=r)

    def key_buckets(self, signals: BucketSignals) -> None:
        """The latest empty- and hot-bucket signals."""
        self.empty_key_buckets.set(sum(len(e["emptyBuckets"]) for e in signals.empty))
        self.hot_key_buckets.set(len(signals.hot))

    def recommended(self, factor: int, processors: int) -> None:
        """The autosizer's latest decided recommendation."""
        self.recommended_factor.set(factor)
        self.recommended_processors.set(processors)

    def export_task_lags(self, lags: TaskLags) -> None:
        """``coxswain_task_lag{processor, task}`` read from ``lags`` (processor -> task ->
        lag, the live leases' last reports) at each scrape: a processor's series leave with
        it, and only tasks the coordinator kept (those of the latest job model) appear."""
        self.registry.register(_TaskLagCollector(lags))

    def export_state_restores(self, stats: Stats, known: KnownTasks) -> None:
        """``coxswain_state_restore_{bytes,files,seconds}{processor, task, source}``: each
        processor's last restore of each task, from its heartbeat stats (``stateRestores``),
        for the tasks of the latest job model only."""
        self.registry.register(_RestoreCollector(stats, known))

    def export_query_restarts(self, stats: Stats) -> None:
        """``coxswain_query_restarts{processor}``: how often each processor's query was
        started again after a failure outside its app's code, from its heartbeat stats
        (``queryRestarts``; a processor's series leaves with it)."""
        self.registry.register(_QueryRestartCollector(stats))

    # LifecycleObserver
    def job_model_generated(self, reason: str, seconds: float, tasks: int) -> None:
        """Record one generation."""
        self.generation_seconds.observe(seconds)
        self.rebalances.labels(reason=reason).inc()
        self.task_count.set(tasks)

    def barrier_ended(self, state: str, seconds: float) -> None:
        """Record a barrier's end."""
        self.barrier_seconds.labels(state=state).observe(max(0.0, seconds))

    def processors_changed(self, count: int) -> None:
        """Record the number of processors."""
        self.processors.set(count)


class _TaskLagCollector(Collector):
    def __init__(self, lags: TaskLags) -> None:
        self._lags = lags

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("coxswain_task_lag",
                                   "State lag per task, as its processor last reported it",
                                   labels=["processor", "task"])
        for processor, lags in sorted(self._lags().items()):
            for task, lag in sorted(lags.items()):
                family.add_metric([processor, task], lag)
        yield family


class _QueryRestartCollector(Collector):
    def __init__(self, stats: Stats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("coxswain_query_restarts",
                                   "Query restarts after failures outside the app's code, "
                                   "as each processor last reported them",
                                   labels=["processor"])
        for processor, stats in sorted(self._stats().items()):
            value = stats.get("queryRestarts")
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                family.add_metric([processor], float(value))
        yield family


class _RestoreCollector(Collector):
    def __init__(self, stats: Stats, known: KnownTasks) -> None:
        self._stats, self._known = stats, known

    def collect(self) -> Iterator[GaugeMetricFamily]:
        labels = ["processor", "task", "source"]
        families = {field: GaugeMetricFamily(f"coxswain_state_restore_{field}",
                                             f"State restored for a task ({field}), as its "
                                             "processor last reported it", labels=labels)
                    for field in ("bytes", "files", "seconds")}
        known = self._known()
        for processor, stats in sorted(self._stats().items()):
            restores = stats.get("stateRestores")
            if not isinstance(restores, dict):
                continue
            for task, figures in sorted(restores.items()):
                if task not in known or not isinstance(figures, dict):
                    continue
                source = str(figures.get("source", "unknown"))[:16]
                for field, family in families.items():
                    value = figures.get(field)
                    if isinstance(value, int | float) and not isinstance(value, bool):
                        family.add_metric([processor, task, source], float(value))
        yield from families.values()
