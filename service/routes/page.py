"""The status page for people: ``GET /`` (the whole page) and ``GET /ui/status`` (its
body, which the page fetches every 5 s). Open and read-only, like ``/status``."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from coordinator.lifecycle import Coordinator
from service import deps
from service.auth import AuthFirstRoute
from service.routes.autosize import autosizer
from service.status_page import PageInputs, view

router = APIRouter(tags=["status page"], route_class=AuthFirstRoute)
Coord = Annotated[Coordinator, Depends(deps.coordinator)]


async def _render(request: Request, coordinator: Coordinator, template: str) -> HTMLResponse:
    store = await deps.checkpoint_store(request)
    sizer = await autosizer(request)
    entries = await asyncio.to_thread(store.read_entries, coordinator.inputs)
    inputs = PageInputs(request.app.state.settings.job, coordinator, entries,
                        sizer.recommendation(sizer.policy), request.app.state.clock.now(),
                        request.app.state.bucket_watch.now())
    body = request.app.state.templates.get_template(template).render(v=view(inputs))
    return HTMLResponse(body, headers={"Cache-Control": "no-store"})


@router.get("/", include_in_schema=False)
async def page(request: Request, coordinator: Coord) -> HTMLResponse:
    """The status page."""
    return await _render(request, coordinator, "status.html")


@router.get("/ui/status", include_in_schema=False)
async def page_body(request: Request, coordinator: Coord) -> HTMLResponse:
    """The status page's body, for its refresh."""
    return await _render(request, coordinator, "status_body.html")
