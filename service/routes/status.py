"""Observability: ``/status`` for operators and the autosizer, ``/metrics`` for Prometheus."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from coordinator.bucket_signals import bucket_signals
from coordinator.lifecycle import Coordinator
from grouping.measures import balance
from grouping.model import JobModel, SystemStreamPartition
from service import deps
from service.auth import AuthFirstRoute
from service.metrics import Metrics

router = APIRouter(tags=["status"], route_class=AuthFirstRoute)
MAX_LAGS_SHOWN = 200  # task lags per processor, and warm-ups, listed by /status
Coord = Annotated[Coordinator, Depends(deps.coordinator)]


def input_streams(inputs: tuple[SystemStreamPartition, ...]) -> list[dict[str, Any]]:
    """``[{"stream": "kafka.orders", "partitions": 8}]``: per stream, how many of its
    partitions the job reads."""
    counts: dict[str, int] = {}
    for ssp in inputs:
        name = f"{ssp.system}.{ssp.stream}"
        counts[name] = counts.get(name, 0) + 1
    return [{"stream": name, "partitions": n} for name, n in sorted(counts.items())]


@router.get("/status")
async def status(coordinator: Coord, request: Request) -> dict[str, Any]:
    """Leader, versions, barrier, processors (with the task lags they report), tasks per
    processor, lags, balance, warm-ups and how far behind they are, the last rebalance's
    reason and time, and the state of inputs discovered from Kafka or Kinesis."""
    latest, active, barrier = coordinator.latest, coordinator.active, coordinator.barrier
    live = coordinator.membership.live()
    lags = coordinator.membership.task_lags()
    stats = coordinator.membership.stats()
    counts = latest.memo("status-counts", _counts) if latest else {}
    processors = []
    for pid, lease in sorted(live.items()):
        active_count, standby_count = counts.get(pid, (0, 0))
        processors.append({
            "processorId": pid,
            "locationId": lease.location_id,
            "host": lease.host,
            "leaseExpiresAt": lease.expires_at,
            "activeTasks": active_count,
            "standbyTasks": standby_count,
            "stats": stats.get(pid, {}),
            # the lags the leader weighs (KIP-441), the first ones by task name
            "taskLags": dict(sorted(lags.get(pid, {}).items())[:MAX_LAGS_SHOWN]),
            "taskLagsReported": len(lags.get(pid, {})),
        })
    # copies placed to catch up before their task's active moves there: how far behind
    # each one's processor says it is (null: nothing reported yet)
    warmups = [{"taskName": task, "processorId": pid, "lag": lags.get(pid, {}).get(task)}
               for task, pid in sorted(coordinator.warmups)[:MAX_LAGS_SHOWN]]
    lag_per_task: dict[str, int] = {}
    if latest is not None:
        owner = latest.memo("owners", lambda m: m.active_owner())  # not copied per call
        for pid, report in lags.items():
            for task, lag in report.items():
                if owner.get(task) == pid:
                    lag_per_task[task] = lag
    last = coordinator.last_rebalance
    monitors = [m for m in (getattr(request.app.state, "partition_monitor", None),
                            getattr(request.app.state, "shard_monitor", None)) if m is not None]
    inputs = [
        {"stream": f"{m.system}.{m.stream}", "partitions": m.partitions,
         "observedPartitions": m.observed, "state": m.state.value, "detail": m.detail}
        for monitor in monitors for m in monitor.status()]
    return {
        "replicaId": coordinator.leader.replica_id,
        "leaderId": coordinator.leader.leader_id(),
        "latestVersion": latest.version if latest else None,
        "activeVersion": active.version if active else None,
        "barrier": barrier.state.value if barrier else None,
        "barrierWaitingFor": sorted(barrier.silent) if barrier else [],
        "elasticityFactor": coordinator.elasticity_factor(),
        "keyHash": coordinator.key_hash().value,
        # empty and hot key buckets, judged from the workers' sampled bucket counts
        "keyBuckets": bucket_signals(
            stats, coordinator.elasticity_factor(),
            request.app.state.settings.bucket_signal_min_records).to_json(),
        "inputPartitions": len(coordinator.inputs),
        # per input stream, the partitions the job reads (a worker checks its broker's)
        "inputStreams": input_streams(coordinator.inputs),
        "processors": processors,
        "tasksPerProcessor": {pid: active_count for pid, (active_count, _) in counts.items()},
        "lagPerTask": lag_per_task,
        "balance": latest.memo("balance", balance) if latest else 0,
        "probingRebalanceWanted": coordinator.probing_wanted(),
        "warmups": warmups,
        "acceptableRecoveryLag": coordinator.config.assignment.acceptable_recovery_lag,
        "monitoredInputs": inputs,
        "lastRebalance": None if last is None else {
            "version": last.version, "reason": last.reason, "at": last.at,
            "generationSeconds": last.generation_seconds,
            "prepareSeconds": last.prepare_seconds},
    }


@router.get("/metrics")
async def metrics(stats: Annotated[Metrics, Depends(deps.metrics)]) -> Response:
    """Prometheus text format."""
    return Response(generate_latest(stats.registry), media_type=CONTENT_TYPE_LATEST)


def _counts(model: JobModel) -> dict[str, tuple[int, int]]:
    """processor id -> (active, standby) task counts, once per model (status is polled)."""
    return {pid: (len(c.active_tasks), len(c.standby_tasks))
            for pid, c in model.containers.items()}
