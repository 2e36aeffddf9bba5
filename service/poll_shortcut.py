"""The hottest request, answered before routing: a conditional ``GET /jobmodel`` (no long
poll) whose ``If-None-Match`` names the latest version gets its 304 here.

Every worker polls this several times a second; FastAPI's routing and dependency
resolution cost more than the answer itself. Anything else (a newer version, a long poll,
a missing or wrong token, no job model yet) falls through to the regular route, which
gives the same answer the slow way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import parse_qs

from service.auth import token_allowed

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class PollShortcut:
    """ASGI middleware: 304 for an up-to-date conditional job model poll."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and scope["method"] == "GET"
                and scope["path"] == "/jobmodel" and self._up_to_date(scope)):
            etag = scope["coxswain.etag"]
            await send({"type": "http.response.start", "status": 304,
                        "headers": [(b"etag", etag)]})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _up_to_date(scope: Scope) -> bool:
        query = scope.get("query_string", b"")
        if query and ("since" in parse_qs(query.decode()) or b"waitMs" in query):
            return False
        app = scope.get("app")
        state = getattr(app, "state", None)
        coordinator = getattr(state, "coordinator", None)
        latest = coordinator.latest if coordinator is not None else None
        if latest is None or state is None:
            return False
        headers = dict(scope.get("headers", []))
        wanted = headers.get(b"if-none-match")
        etag = f'"{latest.version}"'.encode()
        if wanted is None or wanted.strip().removeprefix(b"W/") != etag:
            return False
        if not token_allowed(state.settings, headers.get(b"authorization")):
            return False
        scope["coxswain.etag"] = etag
        return True
