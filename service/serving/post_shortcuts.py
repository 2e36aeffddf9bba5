"""A processor's heartbeats and acks answered before routing: the most frequent writes of
a large fleet.

A thousand processors heartbeating every two seconds are 500 requests a second, and after
each publication a thousand acks arrive at once; FastAPI's routing, dependency resolution
and response model cost about a millisecond each, most of a core for the fleet alone (and,
for acks, most of the time to the barrier's end). Here a well-formed request (worker token,
lease token, a body the route's own model accepts) is answered directly as its route
answers it. Anything else falls through to the route with its body replayed, which
answers it the slow way: a missing token, a body the model refuses (400/422).

A heartbeat the coordinator refuses (unknown processor, fenced, store unreachable) falls
through too: the coordinator wrote nothing, so the route's second attempt meets the same
refusal and answers it as always. An ack the coordinator refuses is answered here with
the error body the route's handler would give (``service.errors``): an ack is a write,
tried once.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError

from coordinator.errors import CoordinatorError
from service.errors import STATUS_BY_CODE, error_response
from service.routes.processors import log_warnings
from service.schemas import AckRequest, HeartbeatRequest
from service.serving.poll_shortcut import ASGIApp, Message, Receive, Scope, Send, worker_call

_PROCESSORS = "/processors/"
_HEARTBEAT = "/heartbeat"
_JOB_MODEL = "/jobmodel/"
_ACK = "/ack"
_MAX_VERSION_DIGITS = 18
# the content types FastAPI reads a body as JSON for (none at all, too)
_JSON_TYPE = re.compile(rb"^\s*application/(json|[^;\s]*\+json)\s*(;.*)?$", re.IGNORECASE)


class PostShortcuts:
    """ASGI middleware (inside the body limit, which hands it the whole body)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        processor_id = _between(path, _PROCESSORS, _HEARTBEAT)
        version = _between(path, _JOB_MODEL, _ACK)
        coordinator = getattr(getattr(scope.get("app"), "state", None), "coordinator", None)
        if (processor_id is None and version is None) or coordinator is None:
            await self.app(scope, receive, send)
            return
        message = await receive()
        if message["type"] != "http.request":
            return  # the client went away (the body limit already saw the body whole)
        body: bytes = message.get("body", b"")
        answer: bytes | None = None
        if processor_id is not None:
            answer = await _heartbeat(scope, coordinator, processor_id, body)
        elif version is not None and version.isdigit() and version.isascii() \
                and len(version) <= _MAX_VERSION_DIGITS:
            answer = await _ack(scope, receive, send, coordinator, int(version), body)
            if answer == b"":
                return  # answered with an error already
        if answer is not None:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(answer)).encode())]})
            await send({"type": "http.response.body", "body": answer})
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return message

        await self.app(scope, replay, send)


def _between(path: str, prefix: str, suffix: str) -> str | None:
    """The one path segment between ``prefix`` and ``suffix``, if ``path`` is that."""
    if not (path.startswith(prefix) and path.endswith(suffix)):
        return None
    segment = path[len(prefix):-len(suffix)]
    return segment if segment and "/" not in segment else None


def _not_json(name: bytes, value: bytes) -> bool:
    return name == b"content-type" and not _JSON_TYPE.match(value)  # FastAPI: not JSON


async def _heartbeat(scope: Scope, coordinator: Any, processor_id: str,
                     body: bytes) -> bytes | None:
    """The heartbeat route's 200 body after renewing the lease, or None to fall through."""
    allowed, token = worker_call(scope, _not_json)
    if not allowed or token is None:
        return None
    try:
        request = HeartbeatRequest.model_validate_json(body)
    except ValidationError:
        return None
    try:
        await coordinator.heartbeat(processor_id, token, request.task_lags, request.stats)
    except CoordinatorError:
        return None
    log_warnings(processor_id, request.warnings)
    latest = coordinator.latest
    answer: dict[str, Any] = {"jobModelVersion": latest.version if latest else None}
    if request.warnings:
        answer["warnings"] = request.warnings
    return json.dumps(answer).encode()


async def _ack(scope: Scope, receive: Receive, send: Send, coordinator: Any, version: int,
               body: bytes) -> bytes | None:
    """The ack route's 200 body once the ack is stored; b"" once a refusal is answered;
    None to fall through."""
    allowed, token = worker_call(scope, _not_json)
    if not allowed:
        return None
    try:
        request = AckRequest.model_validate_json(body)
    except ValidationError:
        return None
    try:
        coordinator.membership.require(request.processor_id, token)
        state = await coordinator.ack(version, request.processor_id)
    except CoordinatorError as e:
        await error_response(STATUS_BY_CODE.get(e.code, 400), e.code, str(e))(
            scope, receive, send)
        return b""
    return b'{"barrier":' + json.dumps(state.value).encode() + b"}"
