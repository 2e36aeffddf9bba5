"""Per-key-bucket checkpoints: read (resolved across elasticity changes), commit (fenced,
monotonic), reset (admin)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from checkpoint.commit import EntryKey, bucket_key, build_commit, commit_index, entry_key
from checkpoint.model import BucketKey, SspStart, TaskCheckpointMeta, parse_start_offset
from checkpoint.resolution import entries_by_partition, resolve_ssp_start
from checkpoint.serde import offset_to_json, skip_watermarks_to_json
from checkpoint.shard_ends import waiting_for
from checkpoint.state_sources import HeldState, ancestors, state_sources
from checkpoint.store.sql import SqlCheckpointStore
from coordinator.errors import Fenced
from coordinator.fenced import FENCED
from coordinator.lifecycle import Coordinator
from grouping.groupers import group_tasks, grouper_by_name
from grouping.key_hash import KeyHash, key_hash_of
from grouping.model import JobModel, SystemStreamPartition, TaskModel
from grouping.serde import ssp_to_json
from grouping.shards import Lineage, lineage_of_config
from service import deps
from service.auth import AuthFirstRoute, lease_token, require_admin, require_worker
from service.errors import ApiError
from service.metrics import Metrics
from service.schemas import (
    COMMIT_REQUEST,
    CommitRequest,
    CommitResponse,
    ErrorBody,
    ResetRequest,
    inline_schema,
)

log = logging.getLogger("coxswain.checkpoints")
router = APIRouter(tags=["checkpoints"], route_class=AuthFirstRoute)
Coord = Annotated[Coordinator, Depends(deps.coordinator)]
Store = Annotated[SqlCheckpointStore, Depends(deps.checkpoint_store)]
Stats = Annotated[Metrics, Depends(deps.metrics)]


def _tasks_of(model: JobModel) -> dict[str, TaskModel]:
    return model.memo("tasks", lambda m: m.active_tasks())


def _job_tasks(model: JobModel, inputs: tuple[SystemStreamPartition, ...], grouper: str,
               max_factor: int) -> dict[str, TaskModel]:
    """Every task the job's current inputs imply under ``model``'s grouper and factor,
    assigned or not (checkpoints are readable while no processor runs a task)."""
    def build(m: JobModel) -> dict[str, TaskModel]:
        found = group_tasks(grouper_by_name(m.ssp_grouper or grouper), inputs,
                            m.elasticity_factor,
                            max_elasticity_factor=max_factor)
        return {**{t.name: t for t in found}, **_tasks_of(m)}

    return model.memo(f"implied-tasks-{hash(inputs)}", build)


@router.get("/checkpoints", dependencies=[Depends(require_worker)],
            responses={404: {"model": ErrorBody}})
async def read_checkpoints(
    coordinator: Coord, store: Store, metrics: Stats,
    task_name: Annotated[list[str] | None, Query(alias="taskName")] = None,
    processor_id: Annotated[str | None, Query(alias="processorId")] = None,
) -> dict[str, Any]:
    """Where each task starts: offsets per SSPKb and skip watermarks (DESIGN.md's rule)."""
    model = coordinator.latest
    if model is None:
        raise ApiError(404, "no_job_model", "no job model has been generated yet")
    tasks = _tasks_of(model)
    if processor_id is not None and task_name:
        raise ApiError(422, "invalid_request", "give taskName (repeatable) or processorId, "
                       "not both")
    if processor_id is not None:
        container = model.containers.get(processor_id)
        if container is None:
            raise ApiError(404, "unknown_processor",
                           f"processor {processor_id!r} is not in job model {model.version}")
        names = [t.name for t in container.active_tasks]
    elif task_name:
        names = list(dict.fromkeys(task_name))
    else:
        raise ApiError(422, "invalid_request", "give taskName (repeatable) or processorId")
    unknown = [n for n in names if n not in tasks]
    if unknown:  # a task of no processor now (none alive, say): the job still implies it
        tasks = _job_tasks(model, coordinator.inputs, coordinator.config.grouper,
                           coordinator.config.max_elasticity_factor)
        unknown = [n for n in names if n not in tasks]
    if unknown:
        raise ApiError(404, "unknown_task",
                       f"not tasks of job model {model.version}: {', '.join(unknown[:10])}")
    wanted = [tasks[n] for n in names]
    partitions = {s.whole() for t in wanted for s in t.ssps}
    lineage = model.memo("lineage", lambda m: lineage_of_config(m.config))
    if lineage:  # Kinesis inputs: the parents' checkpoints say whether they are finished
        partitions |= _parents(partitions, lineage)

    stateful = coordinator.config.stateful
    factor = model.elasticity_factor
    # state may come from any ancestor shard (one that ended before committing state)
    held_in = partitions | {SystemStreamPartition(*a) for found in ancestors(
        ((p.system, p.stream, p.partition) for p in partitions), lineage).values()
        for a in found} if stateful and lineage else partitions

    def read() -> tuple[dict[BucketKey, int], dict[Any, Any], dict[str, TaskCheckpointMeta],
                        dict[str, list[EntryKey]]]:
        # offsets first: commits only move forward, so the state read after them is at
        # least as new: a child shard told its parents are finished gets their final
        # snapshots, never older ones
        # the ancestors' too: a holder's offsets rank it (checkpoint.state_sources)
        entries, resets = store.read_entries(held_in), store.read_resets(partitions)
        holders = store.read_state_holders(held_in) if stateful else {}
        return entries, resets, store.read_task_meta([*names, *holders]), holders

    entries, resets, meta, holders = await asyncio.to_thread(read)
    started = time.perf_counter()
    by_partition = entries_by_partition(entries)
    default_reset = coordinator.config.reset_policy
    out: dict[str, Any] = {}
    def start_of(ssp: SystemStreamPartition) -> SspStart:
        return resolve_ssp_start(ssp, factor, by_partition.get(ssp.whole(), {}),
                                 resets.get(ssp.whole(), default_reset))

    for task in wanted:
        starts = [start_of(ssp) for ssp in task.ssps]
        m = meta.get(task.name)
        out[task.name] = {
            "version": 2 if m is not None and m.checkpoint_id else 1,
            "checkpointId": m.checkpoint_id if m else None,
            "inputOffsets": [{"ssp": ssp_to_json(s.ssp), "offset": offset_to_json(s.start)}
                             for s in starts],
            "skipBelow": [w for s in starts for w in skip_watermarks_to_json(s.skip_below)],
            "stateCheckpointMarkers": {b: dict(v) for b, v in
                                       (m.state_checkpoint_markers if m else {}).items()},
        }
        if stateful:
            out[task.name]["stateSources"] = _state_sources(
                task, factor, key_hash_of(model.config), meta, holders, entries, lineage)
        if lineage:  # shard inputs: parents before children (checkpoint.shard_ends)
            out[task.name]["waitingFor"] = [
                ssp_to_json(s) for s in
                waiting_for(task.ssps, lineage, lambda ssp: start_of(ssp).start)]
    metrics.checkpoint_compute_seconds.observe(time.perf_counter() - started)
    return out


def _parents(partitions: set[SystemStreamPartition], lineage: Lineage
             ) -> set[SystemStreamPartition]:
    """The parent shards of ``partitions`` that the lineage still lists."""
    found = set()
    for p in partitions:
        shards = lineage.get((p.system, p.stream)) or {}
        shard = shards.get(p.partition)
        for parent in shard.parents if shard else ():
            if parent in shards:
                found.add(SystemStreamPartition(p.system, p.stream, parent))
    return found


def _state_sources(task: TaskModel, factor: int, key_hash: KeyHash,
                   meta: Mapping[str, TaskCheckpointMeta],
                   holders: Mapping[str, list[EntryKey]], entries: Mapping[BucketKey, int],
                   lineage: Lineage) -> list[dict[str, Any]]:
    """The snapshots ``task``'s state is made of (``checkpoint.state_sources``), each
    holder ranked by the stored offsets of its key spaces."""
    spaces = [entry_key(ssp, factor) for ssp in task.ssps]

    def held_of(name: str, m: TaskCheckpointMeta) -> HeldState:
        keys = tuple(holders.get(name) or spaces)
        offsets = {k: entries[bucket_key(k)] for k in keys if bucket_key(k) in entries}
        return HeldState(name, m.checkpoint_id, m.state_checkpoint_markers,
                         m.job_model_version, keys, offsets)

    held = [held_of(name, m) for name, m in meta.items()
            if name in holders or name == task.name]  # own rows from before 0003
    out = []
    for s in state_sources(spaces, held, lineage):
        source: dict[str, Any] = {
            "taskName": s.task_name, "checkpointId": s.checkpoint_id,
            "stateCheckpointMarkers": {b: dict(v) for b, v in s.markers.items()},
            "elasticityFactor": s.factor, "keyBuckets": list(s.buckets),
            "nullKeys": s.null_keys, "keyHash": key_hash.value}
        if s.hash_key_range is not None:  # a parent shard's: the child's keys only
            source["hashKeyRange"] = [str(s.hash_key_range[0]), str(s.hash_key_range[1])]
        out.append(source)
    return out


@router.get("/checkpoints/state-markers", dependencies=[Depends(require_worker)])
async def read_state_markers(coordinator: Coord, store: Store) -> dict[str, Any]:
    """The checkpoint id and state checkpoint markers of every task's last checkpoint,
    tasks of older job models included: what a blob store's garbage collector must keep;
    and ``collector``, the one processor that should collect (the first, by id, of the
    latest job model), so that a thousand workers do not all list the blob store."""
    meta = await asyncio.to_thread(store.read_all_task_meta)
    model = coordinator.latest
    return {"collector": min(model.containers) if model and model.containers else None,
            "tasks": {name: {"checkpointId": m.checkpoint_id,
                             "stateCheckpointMarkers": {b: dict(v) for b, v in
                                                        m.state_checkpoint_markers.items()}}
                      for name, m in sorted(meta.items())}}


@router.post("/checkpoints", dependencies=[Depends(require_worker)],
             responses={400: {"model": ErrorBody}, 404: {"model": ErrorBody},
                        409: {"model": ErrorBody}, 422: {"model": ErrorBody}},
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": inline_schema(COMMIT_REQUEST)}}}})
async def commit_checkpoints(
    request: Request, coordinator: Coord, store: Store, metrics: Stats,
) -> CommitResponse:
    """Commit per-key-bucket offsets; 409 ``fenced`` unless the processor owns every task as
    active in the active job model. Offsets never move backwards."""
    body = await _commit_body(request)
    coordinator.membership.require(body["processorId"], lease_token(request))
    return await _commit(body, coordinator, store, metrics)


@router.post("/checkpoints/recovered", dependencies=[Depends(require_worker)],
             responses={400: {"model": ErrorBody}, 401: {"model": ErrorBody},
                        404: {"model": ErrorBody}, 409: {"model": ErrorBody},
                        422: {"model": ErrorBody}},
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": inline_schema(COMMIT_REQUEST)}}}})
async def recover_checkpoints(
    request: Request, coordinator: Coord, store: Store, metrics: Stats,
) -> CommitResponse:
    """Exactly-once output: a checkpoint a processor committed in its Kafka transaction
    but never posted, read from the checkpoint log after it was fenced, posted by a
    participant of the version that fences it (no lease token: the processor is listed in
    the latest version's ``config.fencedProcessors``) or by its own next incarnation (its
    lease token). The same ownership checks as ``POST /checkpoints``: 409 ``fenced`` once
    the version that removed it is done (every participant recovered it before acking)."""
    body = await _commit_body(request)
    processor_id = body["processorId"]
    latest = coordinator.latest
    if latest is None or processor_id not in (latest.config.get(FENCED) or ()):
        coordinator.membership.require(processor_id, lease_token(request))
    return await _commit(body, coordinator, store, metrics)


async def _commit_body(request: Request) -> CommitRequest:
    try:
        return COMMIT_REQUEST.validate_json(await request.body())
    except ValidationError as e:
        raise RequestValidationError(e.errors(include_url=False)) from None


async def _commit(body: CommitRequest, coordinator: Coordinator,
                  store: SqlCheckpointStore, metrics: Metrics) -> CommitResponse:
    processor_id, version = body["processorId"], body["jobModelVersion"]

    try:
        model = await coordinator.check_commit(processor_id, version, list(body["checkpoints"]))
    except Fenced:
        metrics.fenced_commits.inc()
        raise
    index = model.memo("commit-index",
                       lambda m: commit_index(_tasks_of(m).values(), m.elasticity_factor))
    batch = build_commit(body["checkpoints"], index)
    result = await asyncio.to_thread(
        store.write, batch.rows, batch.task_meta, batch.positions,
        job_model_version=version, processor_id=processor_id)
    if result.stale_tasks:
        log.info("late commit of %s by %s (version %d): a newer checkpoint is stored; "
                 "their checkpoint ids and state markers were not written",
                 list(result.stale_tasks), processor_id, version)
    metrics.checkpoint_commits.inc()
    metrics.checkpoint_buckets.inc(len(batch.rows))
    return CommitResponse(committed=len(batch.rows), advanced=result.advanced,
                          stale_tasks=list(result.stale_tasks))


@router.post("/checkpoints/reset", dependencies=[Depends(require_admin)],
             responses={400: {"model": ErrorBody}, 404: {"model": ErrorBody}})
async def reset_checkpoint(body: ResetRequest, coordinator: Coord, store: Store) -> dict[str, Any]:
    """Operator: forget a partition's checkpoints and start it at ``offset``
    (``earliest``, ``latest`` or a decimal offset). The only way offsets move back."""
    ssp = body.ssp.to_ssp().whole()
    if ssp not in coordinator.inputs:
        raise ApiError(404, "unknown_partition", f"{ssp} is not an input partition of the job")
    offset = parse_start_offset(body.offset)
    await asyncio.to_thread(store.reset, ssp, offset)
    return {"ssp": ssp_to_json(ssp), "offset": offset_to_json(offset)}
