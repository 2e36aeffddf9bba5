"""The autosizer's recommendation (read-only, open like ``/status``)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from coordinator.lifecycle import Coordinator
from service import deps
from service.auth import AuthFirstRoute
from service.autosize.window import Autosizer
from service.errors import ApiError
from service.schemas import ErrorBody

router = APIRouter(tags=["autosize"], route_class=AuthFirstRoute)
Coord = Annotated[Coordinator, Depends(deps.coordinator)]


async def autosizer(request: Request) -> Autosizer:
    """The replica's autosizer."""
    found: Autosizer = request.app.state.autosizer
    return found


@router.get("/autosize", responses={422: {"model": ErrorBody}})
async def get_autosize(
    coordinator: Coord, sizer: Annotated[Autosizer, Depends(autosizer)],
    min_factor: Annotated[int | None, Query(alias="minFactor", ge=1)] = None,
    max_factor: Annotated[int | None, Query(alias="maxFactor", ge=1)] = None,
) -> dict[str, Any]:
    """The elasticity factor and processor count the job needs, from the workers' stats
    over the window (input vs processing rate, backlog and its trend, how busy the
    processors are), the reason in words and the figures used; ``decided`` is false when
    the data is too thin (the recommendation is then the current state)."""
    ceiling = coordinator.config.max_elasticity_factor
    low, high = min_factor or 1, min(max_factor or ceiling, ceiling)
    if low > high or low & (low - 1) or high & (high - 1):
        raise ApiError(422, "invalid_request", f"minFactor and maxFactor must be powers of "
                       f"two with minFactor <= maxFactor <= {ceiling}")
    policy = dataclasses.replace(sizer.policy, min_factor=low, max_factor=high)
    r = sizer.recommendation(policy)
    return {"elasticityFactor": r.elasticity_factor, "processors": r.processors,
            "decided": r.decided, "reason": r.reason, "figures": r.figures,
            "currentElasticityFactor": coordinator.elasticity_factor(),
            "currentProcessors": len(coordinator.membership.live()),
            "window": {"samples": sizer.samples, "seconds": policy.window_s,
                       "sampleIntervalSeconds": sizer.interval_s}}
