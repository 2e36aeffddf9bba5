"""The status page for people (``GET /``): what ``/status`` knows, plus the rebalance
history, checkpoint progress per partition and the autosizer's recommendation, rendered
server-side with Jinja2. Read-only, and it shows no secrets (no tokens, no store URLs)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from checkpoint.model import BucketKey
from coordinator.autosize import Recommendation
from coordinator.bucket_signals import BucketSignals
from coordinator.lifecycle import Coordinator

MAX_PARTITION_ROWS = 200


@dataclass(frozen=True, slots=True)
class PageInputs:
    """What the page is made of, read by the route."""

    job: str
    coordinator: Coordinator
    entries: Mapping[BucketKey, int]
    recommendation: Recommendation
    now: float  # the coordinator clock's wall time
    buckets: BucketSignals | None = None  # empty and hot key buckets


def templates() -> Environment:
    """The page's templates (HTML autoescaped: task names and ids are user input)."""
    return Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                       autoescape=select_autoescape(["html"]), trim_blocks=True,
                       lstrip_blocks=True)


def view(inputs: PageInputs) -> dict[str, Any]:
    """The template's data."""
    c = inputs.coordinator
    latest, active, barrier = c.latest, c.active, c.barrier
    stats, lags = c.membership.stats(), c.membership.task_lags()
    warm = c.warmups
    processors = []
    for pid, lease in sorted(c.membership.live().items()):
        container = latest.containers.get(pid) if latest else None
        s = stats.get(pid, {})
        warmups = sum(1 for _, p in warm if p == pid)
        standbys = len(container.standby_tasks) if container else 0
        consumer = s.get("consumerLag") or {}
        behind = [int(v) for v in (s.get("consumerLagMs") or {}).values()
                  if isinstance(v, int | float)]
        processors.append({
            "id": pid, "location": lease.location_id,
            "active": len(container.active_tasks) if container else 0,
            "standby": standbys - warmups, "warmup": warmups,
            "stateLag": sum(int(v) for v in lags.get(pid, {}).values()),
            "consumerLag": sum(int(v) for v in consumer.values()
                               if isinstance(v, int | float)),
            # Kinesis: how far behind the shards' tips (the records are an estimate)
            "behindMs": max(behind) if behind else None,
            "recordsPerSecond": s.get("recordsPerSecond", 0),
            "busy": s.get("busy"), "version": s.get("version"),
            "leaseLeft": max(0.0, lease.expires_at - inputs.now)})
    by_partition: dict[tuple[str, str, int], list[int]] = {}
    for key, offset in inputs.entries.items():
        p = key.ssp
        by_partition.setdefault((p.system, p.stream, p.partition), []).append(offset)
    partitions = [{"name": f"{system}.{stream}[{partition}]", "buckets": len(offsets),
                   "low": min(offsets), "high": max(offsets)}
                  for (system, stream, partition), offsets in sorted(by_partition.items())]
    r = inputs.recommendation
    return {
        "job": inputs.job,
        "replica": c.leader.replica_id, "leader": c.leader.leader_id(),
        "latest": latest.version if latest else None,
        "active": active.version if active else None,
        "barrier": {"state": barrier.state.value if barrier else None,
                    "acked": len(barrier.acked) if barrier else 0,
                    "participants": len(barrier.participants) if barrier else 0,
                    "waitingFor": sorted(barrier.silent) if barrier else []},
        "factor": c.elasticity_factor(), "inputs": len(c.inputs),
        "keyHash": c.key_hash().value,
        "buckets": None if inputs.buckets is None else {
            "empty": [f"{e['stream']}[{e['partition']}]: {e['emptyBuckets']}"
                      for e in inputs.buckets.empty][:MAX_PARTITION_ROWS],
            "hot": [f"{h['stream']}[{h['partition']}] bucket {h['keyBucket']} "
                    f"({h['share']:.0%})" for h in inputs.buckets.hot][:MAX_PARTITION_ROWS],
            "advice": inputs.buckets.advice()},
        "tasks": sum(len(x.active_tasks) for x in latest.containers.values()) if latest else 0,
        "processors": processors,
        "rebalances": [{"version": x.version, "reason": x.reason,
                        "ago": max(0.0, inputs.now - x.at),
                        "seconds": x.generation_seconds} for x in reversed(c.rebalances)],
        "warmups": [{"task": task, "processor": pid, "lag": lags.get(pid, {}).get(task)}
                    for task, pid in sorted(warm)[:MAX_PARTITION_ROWS]],
        "warmupsLeftOut": max(0, len(warm) - MAX_PARTITION_ROWS),
        "acceptableLag": c.config.assignment.acceptable_recovery_lag,
        "partitions": partitions[:MAX_PARTITION_ROWS],
        "partitionsLeftOut": max(0, len(partitions) - MAX_PARTITION_ROWS),
        "autosize": {"factor": r.elasticity_factor, "processors": r.processors,
                     "decided": r.decided, "reason": r.reason},
        "renderedAt": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(inputs.now)),
    }
