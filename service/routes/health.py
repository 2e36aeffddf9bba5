"""``/healthz`` (the process serves) and ``/readyz`` (store reachable, leader known)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from coordinator.errors import StoreUnavailable
from coordinator.lifecycle import Coordinator
from coordinator.store.metadata import MetadataStore
from service import deps
from service.auth import AuthFirstRoute
from service.errors import error_response

router = APIRouter(tags=["health"], route_class=AuthFirstRoute)


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """200 while the process serves."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "not ready, with the reason"}})
async def readyz(
    store: Annotated[MetadataStore, Depends(deps.metadata_store)],
    coordinator: Annotated[Coordinator, Depends(deps.coordinator)],
) -> JSONResponse:
    """200 when the store answers and a leader is known; else 503 with the reason."""
    try:
        await asyncio.to_thread(store.ping)
    except StoreUnavailable as e:
        return error_response(503, "not_ready", str(e))
    leader = coordinator.leader.leader_id()
    if leader is None:
        return error_response(503, "not_ready", "no leader is known")
    return JSONResponse({"status": "ready", "leader": leader})
