"""The hottest requests, answered before routing: a conditional ``GET /jobmodel`` (no long
poll) whose ``If-None-Match`` names the latest version gets its 304 here, and a
processor's own job model request (``processorId`` and ``since``, usually a long poll) is
answered here by the route's own implementation (``service.routes.jobmodel.poll``).

Every worker polls several times a second, and after each publication a thousand
processors are answered and poll again at once; FastAPI's routing, dependency resolution
and parameter validation cost more than the answer itself (the coordinator is CPU-bound
then: the time to the barrier's end is the time to serve these requests). Anything else
(a request without ``processorId`` or ``since``, parameters the route would refuse or
parse differently, a missing or wrong token, a request with a body) falls through to the
regular route, which gives the same answers the slow way; so does every request while no
coordinator has started.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, NamedTuple
from urllib.parse import parse_qs

from coordinator.barrier import BarrierState
from service.auth import token_allowed
from service.errors import error_response
from service.routes.jobmodel import poll

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_PROCESSOR_POLL_KEYS = frozenset(("processorId", "since", "waitMs", "barrier"))
_BARRIER_STATES = {state.value: state for state in BarrierState}
_LEASE_TOKEN = b"coxswain-lease-token"
_MAX_INT_DIGITS = 18  # within int64; longer numbers go to the route's validation
_MAX_PROCESSOR_ID = 255  # the route's limit
_MAX_LEASE_TOKEN = 128  # the route's limit


class PollShortcut:
    """ASGI middleware (outermost): 304 for an up-to-date conditional job model poll, and
    a processor's own (long) poll answered without routing."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" \
                and scope["path"] == "/jobmodel":
            if self._up_to_date(scope):
                etag = scope["coxswain.etag"]
                await send({"type": "http.response.start", "status": 304,
                            "headers": [(b"etag", etag)]})
                await send({"type": "http.response.body", "body": b""})
                return
            request = _processor_poll(scope)
            if request is not None:
                await _answer_poll(scope, receive, send, request)
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


class _ProcessorPoll(NamedTuple):
    processor_id: str
    since: int
    wait_ms: int | None
    barrier: BarrierState | None
    token: str | None


def worker_call(scope: Scope, refuse_header: Callable[[bytes, bytes], bool]
                ) -> tuple[bool, str | None]:
    """(whether a shortcut may answer the call: it carries a token for worker routes and
    no header the route would refuse or treat otherwise, its lease token). A header for
    which ``refuse_header(name, value)`` holds leaves the call to the route, and so do
    two lease tokens or one longer than the routes accept."""
    token: str | None = None
    authorization: bytes | None = None
    for name, value in scope.get("headers", ()):
        if name == _LEASE_TOKEN:
            if token is not None or len(value) > _MAX_LEASE_TOKEN:
                return False, None
            token = value.decode("latin-1")
        elif name == b"authorization":
            authorization = value
        elif refuse_header(name, value):
            return False, None
    return token_allowed(scope["app"].state.settings, authorization), token


def _body_header(name: bytes, _: bytes) -> bool:
    return name in (b"content-length", b"transfer-encoding")  # a body: the route's concern


def _processor_poll(scope: Scope) -> _ProcessorPoll | None:
    """The parameters of a processor's own job model request, when the route would
    accept them exactly so; None to leave the request to the route."""
    state = getattr(scope.get("app"), "state", None)
    if state is None or getattr(state, "coordinator", None) is None:
        return None
    query = scope.get("query_string", b"")
    if not query:
        return None
    try:
        # as Starlette parses it for the route (blank values kept)
        params = parse_qs(query.decode("ascii"), keep_blank_values=True, strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        return None
    if not params.keys() <= _PROCESSOR_POLL_KEYS or any(len(v) != 1 for v in params.values()):
        return None
    processor_id = params.get("processorId", [""])[0]
    since = params.get("since", [""])[0]
    if not processor_id or len(processor_id) > _MAX_PROCESSOR_ID or not _plain_int(since):
        return None
    wait_ms: int | None = None
    if "waitMs" in params:
        if not _plain_int(params["waitMs"][0]):
            return None
        wait_ms = int(params["waitMs"][0])
    barrier: BarrierState | None = None
    if "barrier" in params:
        barrier = _BARRIER_STATES.get(params["barrier"][0])
        if barrier is None:
            return None
    allowed, token = worker_call(scope, _body_header)
    if not allowed:
        return None
    return _ProcessorPoll(processor_id, int(since), wait_ms, barrier, token)


def _plain_int(text: str) -> bool:
    return text.isdigit() and text.isascii() and len(text) <= _MAX_INT_DIGITS


async def _answer_poll(scope: Scope, receive: Receive, send: Send,
                       request: _ProcessorPoll) -> None:
    state = scope["app"].state

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    answer = await poll(state.coordinator, state.settings.max_wait_ms, request.processor_id,
                        request.since, request.since, request.wait_ms, request.barrier,
                        request.token, disconnected)
    if answer.error is not None:  # the lease token refused
        await error_response(answer.status, *answer.error)(scope, receive, send)
        return
    # ``since`` is always given here, so "no job model yet" is a 304, never the route's 404
    assert answer.status != 404
    headers: list[tuple[bytes, bytes]] = []
    if answer.status == 200:
        headers.append((b"content-length", str(len(answer.body)).encode()))
        headers.append((b"content-type", b"application/json"))
    if answer.etag is not None:
        headers.append((b"etag", answer.etag.encode()))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})
