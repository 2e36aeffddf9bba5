"""Elasticity: read and set the elasticity factor (operators, the autosizer)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from coordinator.lifecycle import Coordinator
from grouping.key_bucket import validate_elasticity_factor
from service import deps
from service.auth import AuthFirstRoute, require_admin
from service.schemas import ErrorBody, ScaleAccepted, ScaleRequest, ScaleView

router = APIRouter(tags=["scale"], route_class=AuthFirstRoute)
Coord = Annotated[Coordinator, Depends(deps.coordinator)]


@router.get("/scale")
async def get_scale(coordinator: Coord) -> ScaleView:
    """The elasticity factor, its maximum, live processors and task count."""
    latest = coordinator.latest
    tasks = sum(len(c.active_tasks) for c in latest.containers.values()) if latest else 0
    return ScaleView(
        elasticity_factor=coordinator.elasticity_factor(),
        max_elasticity_factor=coordinator.config.max_elasticity_factor,
        live_processors=len(coordinator.membership.live()),
        task_count=tasks,
        key_hash=coordinator.key_hash().value,
    )


@router.post("/scale", status_code=202, dependencies=[Depends(require_admin)],
             responses={422: {"model": ErrorBody}})
async def set_scale(body: ScaleRequest, coordinator: Coord) -> JSONResponse:
    """Set the elasticity factor (a power of two within 1..max); a new version follows."""
    validate_elasticity_factor(body.elasticity_factor, coordinator.config.max_elasticity_factor)
    version = await coordinator.scale(body.elasticity_factor)
    return JSONResponse(ScaleAccepted(job_model_version=version).model_dump(by_alias=True),
                        status_code=202)
