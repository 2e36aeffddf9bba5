"""What a chaos run does (its faults and their durations) and what its independent check
found."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

#: faults of every run: processes killed or stopped, services stopped
FAULTS = ("kill_worker", "kill_leader", "stop_leader", "restart_zookeeper", "stop_postgres")
#: and of a stateful run: the blob store stopped, networks cut (real network namespaces)
NETWORK_FAULTS = ("stop_blob_store", "partition_worker", "partition_leader_from_zookeeper",
                  "partition_worker_from_blob_store")
STATEFUL_FAULTS = FAULTS + NETWORK_FAULTS
#: faults whose victim is one worker process: its uncommitted output may come again
WORKER_FAULTS = ("kill_worker", "partition_worker", "partition_worker_from_blob_store")
FACTORS = (2, 4, 2, 1)


@dataclass
class ChaosConfig:
    """What the run does."""

    seconds: float = 600.0
    workers: int = 3
    partitions: int = 4
    keys: int = 500
    rate: float = 100.0  # records/s
    gap_s: tuple[float, float] = (6.0, 15.0)  # between faults
    scale_every_s: float = 30.0
    pg_outage_s: float = 15.0
    stop_leader_s: float = 8.0
    restart_after_s: float = 3.0  # a killed replica or a ZooKeeper member comes back
    lease_ttl_ms: int = 10_000
    seed: int = 1
    every_fault_once: bool = False  # a short run: each kind at least once, in random order
    # a stateful run: the counting app with one standby per task, the blob store on an S3
    # API server, replicas and workers each in a network namespace of its own
    stateful: bool = False
    blob_outage_s: float = 20.0  # the blob store unreachable for every worker
    partition_worker_s: float = 15.0  # a worker cut from the coordinators (> the lease)
    partition_zookeeper_s: float = 12.0  # the leader cut from ZooKeeper (> its session)
    partition_blobs_s: float = 10.0  # a worker cut from the blob store while it commits
    pad_bytes: int = 2048  # state per key beside the count: each commit uploads some
    # stateful only: workers with --exactly-once, the output read as a read_committed
    # reader does; then no duplicate at all is allowed, whatever the fault
    exactly_once: bool = False

    @property
    def faults(self) -> tuple[str, ...]:
        return STATEFUL_FAULTS if self.stateful else FAULTS


@dataclass
class FaultCost:
    """What one injected fault cost: how long the task whose output stopped longest went
    without output after it began, and the duplicates its victim (a worker process)
    left."""

    kind: str
    at: float  # wall time the fault began
    seconds: float  # how long it lasted (0: instantaneous)
    victim_pids: set[int] = field(default_factory=set)
    output_stopped_s: float = 0.0
    duplicates: int = 0


@dataclass
class ChaosReport:
    """What the independent check found."""

    produced: int = 0  # in the input topic, as read back by the checker
    # records the producer sent but Kafka never took (its delivery reports' errors):
    # the harness's loss, not the job's (told apart so that neither hides the other)
    undelivered: int = 0
    output_records: int = 0
    lost: int = 0
    order_violations: int = 0
    duplicates: int = 0
    unexplained_duplicates: int = 0
    wrong_counts: int = 0  # stateful: an output whose count is not its key's seq + 1
    faults: Counter[str] = field(default_factory=Counter)
    costs: list[FaultCost] = field(default_factory=list)
    factor_changes: int = 0
    versions_backwards: list[str] = field(default_factory=list)
    final_version: int = 0
    final_barrier: str = ""
    worker_exits: list[str] = field(default_factory=list)  # not caused by a kill -9
    drain_seconds: float = 0.0
    examples: list[str] = field(default_factory=list)
    kinds: tuple[str, ...] = FAULTS
    exactly_once: bool = False  # every duplicate fails the run
    # lost records' neighbours (the output before and after each), and what the logs
    # say about them (``bench.chaos.trace``), for a failed check
    lost_around: list[tuple[dict[str, Any] | None, dict[str, Any] | None]] = field(
        default_factory=list)
    trace: list[str] = field(default_factory=list)
    # worker log lines: a reading that slipped past a task's start (a bug, though
    # healed: fails the run), a cut report Spark dropped (healed; Spark's: reported)
    slipped: list[str] = field(default_factory=list)
    dropped_reports: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.lost == 0 and self.order_violations == 0
                and self.unexplained_duplicates == 0 and self.wrong_counts == 0
                and not (self.exactly_once and self.duplicates)
                and not self.versions_backwards and self.final_barrier == "done"
                and not self.worker_exits and not self.slipped)

    def lines(self) -> list[str]:
        return [
            f"produced {self.produced} (in the input topic; not delivered by the "
            f"producer: {self.undelivered}), output {self.output_records} records",
            f"lost {self.lost}, per-key order violations {self.order_violations}, "
            f"counts not seq + 1 {self.wrong_counts}",
            f"duplicates {self.duplicates} (not from a killed or partitioned worker: "
            f"{self.unexplained_duplicates})"
            + ("; exactly-once output, read_committed: any is a failure"
               if self.exactly_once else ""),
            "faults: " + ", ".join(f"{k} {self.faults[k]}" for k in self.kinds)
            + f"; factor changes {self.factor_changes}",
            *self.cost_lines(),
            f"versions backwards: {self.versions_backwards or 'none'}; last version "
            f"{self.final_version}, barrier {self.final_barrier}",
            f"workers that exited on their own: {self.worker_exits or 'none'}",
            f"drained in {self.drain_seconds:.0f}s",
            f"readings that slipped past a task's start: {len(self.slipped)}; cut reports "
            f"Spark dropped: {len(self.dropped_reports)}",
            *self.slipped[:5], *self.dropped_reports[:5],
            *self.examples[:10],
            *self.trace,
        ]

    def cost_lines(self) -> list[str]:
        """Per kind of fault: the output stopped (median and worst over its injections)
        and the duplicates it left."""
        out = []
        for kind in self.kinds:
            costs = sorted(c.output_stopped_s for c in self.costs if c.kind == kind)
            if not costs:
                continue
            dups = sum(c.duplicates for c in self.costs if c.kind == kind)
            out.append(f"  {kind}: output stopped {costs[len(costs) // 2]:.1f} s median, "
                       f"{costs[-1]:.1f} s worst (x{len(costs)}); duplicates {dups}")
        return out
