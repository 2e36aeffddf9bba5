"""What the lifecycle is configured with, and what it reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from checkpoint.model import ResetPolicy
from grouping.assignment import AssignmentParams
from grouping.key_bucket import DEFAULT_MAX_ELASTICITY_FACTOR
from grouping.key_hash import KeyHash
from grouping.model import SystemStreamPartition


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Everything the lifecycle is configured with (times in seconds)."""

    inputs: tuple[SystemStreamPartition, ...] = ()
    # streams whose partition count is discovered (Kafka): their partitions come from the
    # latest job model until the partition monitor reports
    monitored_streams: tuple[tuple[str, str], ...] = ()
    shard_streams: tuple[tuple[str, str], ...] = ()  # Kinesis inputs: shards listed
    grouper: str = "GroupByPartition"
    elasticity_factor: int = 1
    max_elasticity_factor: int = DEFAULT_MAX_ELASTICITY_FACTOR
    stateful: bool = False
    lease_ttl_s: float = 10.0
    heartbeat_interval_s: float = 2.0
    debounce_s: float = 1.0
    barrier_timeout_s: float = 30.0
    # a barrier waits past its timeout for processors that heartbeat and report
    # handing over (``coordinator.lifecycle.handing_over``), until this long after it
    # opened: at least a worker's commit wait (60 s) plus a slow batch
    barrier_max_s: float = 120.0
    probing_interval_s: float = 600.0
    # a probing rebalance also runs as soon as heartbeats show a warm-up caught up, at most
    # once per this interval (KAFKA-10199: scale-out should not wait for the timer)
    probing_min_interval_s: float = 5.0
    # a processor whose long poll's connection closes and that shows no life (a poll here,
    # a heartbeat anywhere) within this leaves at once, not at its lease's expiry (0: off)
    poll_close_grace_s: float = 1.5
    assignment: AssignmentParams = field(default_factory=AssignmentParams)
    keep_job_models: int = 10
    # every heartbeat that reaches the leader written to the store; False: the leader
    # (which alone expires leases) renews in memory and writes half a TTL apart. Other
    # replicas always write heartbeats through (the leader reads them there).
    lease_write_through: bool = False
    # this replica is the only one the store will ever have (the embedded store, held by
    # its exclusive lock): every lease change goes through its cache, so lease sweeps
    # need not read the store (1000 leases every second, merged under the lock)
    sole_replica: bool = False
    reset_policy: ResetPolicy = ResetPolicy.EARLIEST
    # the key-bucket hash this replica was started with; None: the job's own (a new job's:
    # grouping.key_hash.DEFAULT_KEY_HASH). See coordinator.lifecycle.job_key_hash.
    key_hash: KeyHash | None = None


@dataclass(frozen=True, slots=True)
class RebalanceRecord:
    """Why and when a version was generated, and what it took: ``generation_seconds`` the
    model's computation (grouping and assignment: what an assignor's figure is), and
    ``prepare_seconds`` what the leader then did before publishing it (rendering the
    answers' JSON, and waiting for the state lock)."""

    version: int
    reason: str
    at: float
    generation_seconds: float
    prepare_seconds: float


class LifecycleObserver(Protocol):
    """What the lifecycle reports (metrics); every method must be cheap and never raise."""

    def job_model_generated(self, reason: str, seconds: float, tasks: int) -> None:
        """A version was generated for ``reason`` in ``seconds`` with ``tasks`` tasks."""
        ...

    def barrier_ended(self, state: str, seconds: float) -> None:
        """A barrier completed or timed out after ``seconds``."""
        ...

    def processors_changed(self, count: int) -> None:
        """The number of registered processors changed."""
        ...


class NoObserver:
    """Reports nothing."""

    def job_model_generated(self, reason: str, seconds: float, tasks: int) -> None:
        pass

    def barrier_ended(self, state: str, seconds: float) -> None:
        pass

    def processors_changed(self, count: int) -> None:
        pass
