"""The job model: fetch with ETag / 304 / long poll, and barrier acknowledgements."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.responses import JSONResponse

from coordinator.barrier import BarrierState
from coordinator.lifecycle import Coordinator
from grouping.serde import container_model_to_json
from service import deps
from service.auth import require_worker
from service.errors import ApiError
from service.schemas import AckRequest, BarrierResponse, ErrorBody
from service.settings import Settings

router = APIRouter(tags=["jobmodel"])
Coord = Annotated[Coordinator, Depends(deps.coordinator)]


def _etag_version(value: str | None) -> int | None:
    if value is None:
        return None
    raw = value.strip().removeprefix("W/").strip('"')
    if not raw.isdigit():
        raise ApiError(400, "invalid_request",
                       f"If-None-Match must be a version ETag, got {value!r}")
    return int(raw)


@router.get("/jobmodel", responses={304: {"description": "nothing newer"},
                                     404: {"model": ErrorBody}})
async def get_job_model(
    coordinator: Coord,
    settings: Annotated[Settings, Depends(deps.settings)],
    processor_id: Annotated[str | None, Query(alias="processorId", max_length=255)] = None,
    since: Annotated[int | None, Query(ge=0)] = None,
    wait_ms: Annotated[int | None, Query(alias="waitMs", ge=0)] = None,
    barrier: Annotated[BarrierState | None, Query(
        description="with since: also answer when version `since`'s barrier leaves this "
                    "state (e.g. pending -> done)")] = None,
    if_none_match: Annotated[str | None, Header()] = None,
) -> Response:
    """The latest job model (ETag = version). ``since`` + ``waitMs`` long-polls."""
    known = since if since is not None else _etag_version(if_none_match)
    if wait_ms:
        await coordinator.wait_for_change(known, barrier, min(wait_ms, settings.max_wait_ms) / 1000)
    latest = coordinator.latest
    if latest is None:
        if known is not None:
            return Response(status_code=304)
        raise ApiError(404, "no_job_model", "no job model has been generated yet")
    state = coordinator.barrier.state if coordinator.barrier else BarrierState.PENDING
    barrier_changed = (barrier is not None and since == latest.version and state is not barrier)
    if known is not None and latest.version <= known and not barrier_changed:
        return Response(status_code=304, headers={"ETag": f'"{latest.version}"'})
    containers = latest.containers
    if processor_id is not None:
        containers = {pid: c for pid, c in containers.items() if pid == processor_id}
    body: dict[str, Any] = {
        "version": latest.version,
        "barrier": state.value,
        "config": dict(latest.config),
        "containers": {pid: container_model_to_json(c) for pid, c in containers.items()},
    }
    return JSONResponse(body, headers={"ETag": f'"{latest.version}"'})


@router.post("/jobmodel/{version}/ack", dependencies=[Depends(require_worker)],
             responses={404: {"model": ErrorBody}, 409: {"model": ErrorBody}})
async def ack(version: int, body: AckRequest, coordinator: Coord) -> BarrierResponse:
    """Acknowledge ``version`` (after stopping and committing what the processor loses)."""
    coordinator.membership.require(body.processor_id)
    state = await coordinator.ack(version, body.processor_id)
    return BarrierResponse(barrier=state.value)
