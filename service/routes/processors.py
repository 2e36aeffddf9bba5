"""Membership: register, heartbeat, leave, list (API.md "Processors")."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import JSONResponse

from coordinator.lifecycle import Coordinator
from grouping.key_hash import KeyHash
from service import deps
from service.auth import LEASE_TOKEN_HEADER, AuthFirstRoute, is_admin, require_worker
from service.errors import ApiError
from service.schemas import (
    ErrorBody,
    HeartbeatRequest,
    HeartbeatResponse,
    ProcessorView,
    RegisterRequest,
    RegisterResponse,
)
from service.settings import Settings

log = logging.getLogger("coxswain.processors")
router = APIRouter(tags=["processors"], route_class=AuthFirstRoute)
Coord = Annotated[Coordinator, Depends(deps.coordinator)]
LeaseToken = Annotated[str | None, Header(
    alias=LEASE_TOKEN_HEADER, max_length=128,
    description="the lease token of the processor's registration")]


@router.post("/processors", status_code=201, dependencies=[Depends(require_worker)],
             responses={200: {"model": RegisterResponse}, 409: {"model": ErrorBody}})
async def register(
    body: RegisterRequest, coordinator: Coord, request: Request,
    settings: Annotated[Settings, Depends(deps.settings)],
) -> JSONResponse:
    """Register a processor (201), or renew the same live one at the same location (200).
    The answer's ``leaseToken`` identifies this incarnation: its heartbeats, acks, commits
    and leave carry it (header ``Coxswain-Lease-Token``); a registration issues a new one
    and fences the previous. 409 ``incompatible_worker`` when the worker names the
    key hashes it computes (``keyHashes``) and the job's is not among them: its key
    buckets would not be the job's, and records would reach the wrong tasks. A worker
    that names none is accepted (the REST contract predates the field) and, on a job
    whose hash is not crc32, warned about in the log."""
    job_hash = coordinator.key_hash()
    if body.key_hashes is not None and job_hash.value not in body.key_hashes:
        raise ApiError(409, "incompatible_worker", (
            f"this job's key buckets use {job_hash.value}, and this worker computes "
            f"{', '.join(body.key_hashes) or 'none'}: upgrade the worker"))
    warned: set[str] = request.app.state.undeclared_key_hashes
    if body.key_hashes is None and job_hash is not KeyHash.CRC32 \
            and (body.processor_id or "") not in warned:
        warned.add(body.processor_id or "")  # once per processor, not per registration
        log.warning("processor %s registered without naming the key hashes it computes: "
                    "a Coxswain worker from before per-job key hashes computes crc32 and "
                    "would process the wrong keys' records of this %s job above factor "
                    "1; upgrade it", body.processor_id or "(unnamed)", job_hash.value,
                    extra={"reason": "undeclared_key_hashes"})
    lease, created, token = await coordinator.register(body.processor_id, body.location_id,
                                                       body.host)
    latest = coordinator.latest
    payload = RegisterResponse(
        processor_id=lease.processor_id,
        lease_token=token,
        lease_ttl_ms=settings.lease_ttl_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        job_model_version=latest.version if latest else None,
    )
    return JSONResponse(payload.model_dump(by_alias=True), status_code=201 if created else 200)


@router.post("/processors/{processor_id}/heartbeat", dependencies=[Depends(require_worker)],
             responses={404: {"model": ErrorBody}, 409: {"model": ErrorBody}},
             response_model_exclude_none=True)
async def heartbeat(
    processor_id: str, body: HeartbeatRequest, coordinator: Coord, token: LeaseToken = None,
) -> HeartbeatResponse:
    """Renew the lease; report task lags and stats. 404 once the lease expired; 409
    ``fenced`` with the token of an earlier registration. Lags or stats out of bounds
    are left out (or clamped) and named in ``warnings``: the lease is renewed. The
    stat ``taskHosts`` (``{task: host}``: where each task's state is, when not at the
    processor's location) becomes those tasks' localities once a barrier is done."""
    await coordinator.heartbeat(processor_id, token, body.task_lags, body.stats)
    log_warnings(processor_id, body.warnings)
    latest = coordinator.latest
    return HeartbeatResponse(job_model_version=latest.version if latest else None,
                             warnings=body.warnings or None)


def log_warnings(processor_id: str, warnings: list[str]) -> None:
    """Log what a heartbeat left out (a worker sending bad values is a bug to see)."""
    if warnings:
        log.warning("heartbeat of %s: %s", processor_id, "; ".join(warnings))


@router.delete("/processors/{processor_id}", status_code=204,
               dependencies=[Depends(require_worker)],
               responses={404: {"model": ErrorBody}, 409: {"model": ErrorBody}})
async def leave(processor_id: str, request: Request, coordinator: Coord,
                token: LeaseToken = None) -> Response:
    """The processor leaves now; a rebalance follows. A processor sends its lease token;
    an operator removing one uses the admin token instead (or, on an open deployment,
    none). A lease token is always checked: a call carrying another incarnation's (or
    another processor's) token is fenced, open deployment or not."""
    if token is not None or not is_admin(request):
        coordinator.membership.require(processor_id, token)
    if not await coordinator.leave(processor_id):
        raise ApiError(404, "unknown_processor", f"processor {processor_id!r} is not registered")
    return Response(status_code=204)


@router.get("/processors")
async def list_processors(coordinator: Coord) -> list[ProcessorView]:
    """Registered processors, their leases and their tasks in the latest job model."""
    latest = coordinator.latest
    out = []
    for pid, lease in sorted(coordinator.membership.live().items()):
        container = latest.containers.get(pid) if latest else None
        out.append(ProcessorView(
            processor_id=pid, location_id=lease.location_id, host=lease.host,
            lease_expires_at=lease.expires_at,
            tasks=sorted(container.tasks) if container else []))
    return out
