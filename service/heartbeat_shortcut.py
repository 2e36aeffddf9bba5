"""Heartbeats answered before routing: the most frequent request of a large fleet.

A thousand processors heartbeating every two seconds are 500 requests a second; FastAPI's
routing, dependency resolution and response model cost about a millisecond each, most of a
core for the fleet alone. Here a well-formed heartbeat (worker token, lease token, a body
the route's own model accepts) renews the lease directly and gets the route's answer.
Anything else falls through to the route with its body replayed, which answers it the
slow way: a missing token, a body the model refuses (422), or a heartbeat the coordinator
refuses (unknown processor, fenced, store unreachable: the coordinator wrote nothing, so
the route's second attempt meets the same refusal and answers it as always).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from coordinator.errors import CoordinatorError
from service.auth import token_allowed
from service.poll_shortcut import ASGIApp, Message, Receive, Scope, Send
from service.schemas import HeartbeatRequest

_PREFIX = "/processors/"
_SUFFIX = "/heartbeat"
_LEASE_TOKEN = b"coxswain-lease-token"


class HeartbeatShortcut:
    """ASGI middleware (inside the body limit, which hands it the whole body)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        processor_id = self._processor_of(scope)
        if processor_id is None:
            await self.app(scope, receive, send)
            return
        message = await receive()
        body = message.get("body", b"") if message["type"] == "http.request" else b""
        answer = await self._renew(scope, processor_id, body) \
            if message["type"] == "http.request" else None
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

    @staticmethod
    def _processor_of(scope: Scope) -> str | None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        path: str = scope["path"]
        if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
            return None
        processor_id = path[len(_PREFIX):-len(_SUFFIX)]
        return processor_id if processor_id and "/" not in processor_id else None

    @staticmethod
    async def _renew(scope: Scope, processor_id: str, body: bytes) -> bytes | None:
        """The route's 200 body after renewing the lease, or None to fall through."""
        state: Any = getattr(scope.get("app"), "state", None)
        coordinator = getattr(state, "coordinator", None)
        if coordinator is None:
            return None
        headers = dict(scope.get("headers", []))
        if not token_allowed(state.settings, headers.get(b"authorization")):
            return None
        raw_token = headers.get(_LEASE_TOKEN)
        if raw_token is None or len(raw_token) > 128:
            return None
        try:
            request = HeartbeatRequest.model_validate_json(body)
        except ValidationError:
            return None
        try:
            await coordinator.heartbeat(processor_id, raw_token.decode("latin-1"),
                                        request.task_lags, request.stats)
        except CoordinatorError:
            return None
        latest = coordinator.latest
        return json.dumps({"jobModelVersion": latest.version if latest else None}).encode()
