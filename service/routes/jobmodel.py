"""The job model: fetch with ETag / 304 / long poll, and barrier acknowledgements."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, NamedTuple

from fastapi import APIRouter, Depends, Header, Query, Request, Response

from coordinator.barrier import BarrierState
from coordinator.errors import CoordinatorError, Fenced, UnknownProcessor
from coordinator.lifecycle import Coordinator
from grouping.model import JobModel
from grouping.serde import ContainerJson, container_texts, containers_json
from service import deps
from service.auth import LEASE_TOKEN_HEADER, AuthFirstRoute, require_worker
from service.errors import ApiError
from service.schemas import AckRequest, BarrierResponse, ErrorBody
from service.settings import Settings

router = APIRouter(tags=["jobmodel"], route_class=AuthFirstRoute)
Coord = Annotated[Coordinator, Depends(deps.coordinator)]


def _etag_version(value: str | None) -> int | None:
    if value is None:
        return None
    raw = value.strip().removeprefix("W/").strip('"')
    if not raw.isdigit():
        raise ApiError(400, "invalid_request",
                       f"If-None-Match must be a version ETag, got {value!r}")
    return int(raw)


@router.get("/jobmodel", dependencies=[Depends(require_worker)],
            responses={304: {"description": "nothing newer"}, 404: {"model": ErrorBody}})
async def get_job_model(
    request: Request,
    coordinator: Coord,
    settings: Annotated[Settings, Depends(deps.settings)],
    processor_id: Annotated[str | None, Query(alias="processorId", max_length=255)] = None,
    since: Annotated[int | None, Query(ge=0)] = None,
    wait_ms: Annotated[int | None, Query(alias="waitMs", ge=0)] = None,
    barrier: Annotated[BarrierState | None, Query(
        description="with since: also answer when version `since`'s barrier leaves this "
                    "state (e.g. pending -> done)")] = None,
    if_none_match: Annotated[str | None, Header()] = None,
    token: Annotated[str | None, Header(alias=LEASE_TOKEN_HEADER, max_length=128)] = None,
) -> Response:
    """The latest job model (ETag = version). ``since`` + ``waitMs`` long-polls."""
    known = since if since is not None else _etag_version(if_none_match)

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    answer = await poll(coordinator, settings.max_wait_ms, processor_id, known, since,
                        wait_ms, barrier, token, disconnected)
    if answer.error is not None:
        raise ApiError(answer.status, *answer.error)
    if answer.status == 404:
        raise ApiError(404, NO_JOB_MODEL, NO_JOB_MODEL_DETAIL)
    headers = None if answer.etag is None else {"ETag": answer.etag}
    if answer.status == 200:
        return Response(answer.body, media_type="application/json", headers=headers)
    return Response(status_code=answer.status, headers=headers)


NO_JOB_MODEL = "no_job_model"
NO_JOB_MODEL_DETAIL = "no job model has been generated yet"


class PollAnswer(NamedTuple):
    """What a job model request gets: 200 with ``body``, 304, 404 (no job model) or 499
    (its own long poll closed: nobody reads it); ``etag`` is the version's ETag. With
    ``error`` (code, detail): the processor's lease token is refused (404
    ``unknown_processor``, 409 ``fenced``)."""

    status: int
    body: bytes = b""
    etag: str | None = None
    error: tuple[str, str] | None = None


async def poll(
    coordinator: Coordinator, max_wait_ms: int, processor_id: str | None, known: int | None,
    since: int | None, wait_ms: int | None, barrier: BarrierState | None,
    token: str | None, disconnected: Callable[[], Awaitable[None]],
) -> PollAnswer:
    """The job model request's answer, once there is one: the route's and the poll
    shortcut's (``service.serving.poll_shortcut``) one implementation. ``known`` is the version
    the caller has (``since``, else its ``If-None-Match``); ``disconnected`` returns when
    the caller's connection closes."""
    if processor_id is not None:
        coordinator.poll_seen(processor_id)
        if token is not None and not coordinator.membership.holds(processor_id, token):
            refused = await _lease_refused(coordinator, processor_id, token)
            if refused is not None:
                return refused
    if wait_ms:
        waiting = coordinator.wait_for_change(known, barrier, min(wait_ms, max_wait_ms) / 1000)
        if processor_id is None or token is None or not _holds_lease(
                coordinator, processor_id, token):
            await waiting
        elif await _closed_before(disconnected, waiting):
            # the processor's own long poll (its lease token) lost its connection: a
            # dead worker's does at once (coordinator.poll_closed weighs it)
            coordinator.poll_closed(processor_id)
            return PollAnswer(499)
    latest = coordinator.latest
    if latest is None:
        if known is not None:
            return PollAnswer(304)
        return PollAnswer(404)
    etag = f'"{latest.version}"'
    state = coordinator.barrier.state if coordinator.barrier else BarrierState.PENDING
    barrier_changed = (barrier is not None and since == latest.version and state is not barrier)
    if known is not None and latest.version <= known and not barrier_changed:
        return PollAnswer(304, etag=etag)
    rendered = prerender(latest)
    if processor_id is None:
        containers = rendered.everything
    else:
        one = rendered.by_processor.get(processor_id)
        containers = "{}" if one is None else "{" + json.dumps(processor_id) + ":" + one + "}"
    body = (rendered.head + json.dumps(state.value) + rendered.config + containers + "}")
    return PollAnswer(200, body.encode(), etag)


async def _lease_refused(coordinator: Coordinator, processor_id: str, token: str
                         ) -> PollAnswer | None:
    """A processor's own poll whose lease this replica does not hold as given: asked of
    the store (a registration through another replica is there), and answered as a
    heartbeat would be when the lease is gone (404) or another incarnation's (409), so a
    worker learns it lost its lease from its poll as from any request. A store that
    cannot say does not hold up the poll."""
    try:
        await asyncio.to_thread(coordinator.membership.require, processor_id, token)
    except (UnknownProcessor, Fenced) as e:
        return PollAnswer(404 if isinstance(e, UnknownProcessor) else 409,
                          error=(e.code, str(e)))
    except CoordinatorError:
        return None
    return None


def _holds_lease(coordinator: Coordinator, processor_id: str, token: str) -> bool:
    """True if ``token`` is the lease token of ``processor_id``'s current incarnation (a
    closed poll of anyone else must not cost it its tasks)."""
    return coordinator.membership.holds(processor_id, token)


async def _closed_before(disconnected: Callable[[], Awaitable[None]],
                         waiting: Awaitable[object]) -> bool:
    """Await ``waiting``; True if the client's connection closed first (then ``waiting``
    is cancelled)."""
    wait = asyncio.ensure_future(waiting)
    watch = asyncio.ensure_future(disconnected())
    try:
        done, _ = await asyncio.wait({wait, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (wait, watch):
            task.cancel()
    return watch in done and wait not in done


def prerender(model: JobModel) -> _Rendered:
    """The API JSON of ``model``'s containers (the whole object, and each one's) and of
    the rest of its answer, rendered once per version and memoized on the (immutable)
    model; the coordinator renders it off the event loop before publishing
    (:class:`Prerenderer`)."""
    return model.memo("api-json", lambda m: _Rendered(
        containers_json(m), container_texts(m), '{"version":' + str(m.version) + ',"barrier":',
        ',"config":' + json.dumps(dict(m.config)) + ',"containers":'))


@dataclass(frozen=True, slots=True)
class _Rendered:
    everything: str
    by_processor: Mapping[str, str]
    head: str  # up to the barrier state
    config: str  # from the barrier state to the containers


class Prerenderer:
    """:func:`prerender` for the leader's successive versions: containers the new version
    shares with the one rendered before reuse their JSON (:class:`ContainerJson`), which
    the store's copy of the model then reuses too. A 100k-task model is megabytes of JSON,
    and every worker fetches it (or its own part) after each publication."""

    def __init__(self) -> None:
        self._texts = ContainerJson()

    def __call__(self, model: JobModel) -> _Rendered:
        self._texts.of(model)  # memoised on the model: prerender finds it there
        return prerender(model)


@router.post("/jobmodel/{version}/ack", dependencies=[Depends(require_worker)],
             responses={404: {"model": ErrorBody}, 409: {"model": ErrorBody}})
async def ack(
    version: int, body: AckRequest, coordinator: Coord,
    token: Annotated[str | None, Header(alias=LEASE_TOKEN_HEADER, max_length=128)] = None,
) -> BarrierResponse:
    """Acknowledge ``version`` (after stopping and committing what the processor loses);
    the call carries the processor's lease token."""
    coordinator.membership.require(body.processor_id, token)
    state = await coordinator.ack(version, body.processor_id)
    return BarrierResponse(barrier=state.value)
