"""Bearer-token auth: a worker token for worker routes, an admin token for operator routes.

With no tokens configured every route is open (the server then refuses to listen beyond
loopback unless ``--insecure``). The admin token is accepted on worker routes too.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.routing import APIRoute
from starlette.responses import Response as StarletteResponse

from service.errors import ApiError
from service.settings import Settings


def _presented(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _matches(token: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(token.encode(), expected.encode())


def _check(request: Request, admin_only: bool) -> None:
    settings: Settings = request.app.state.settings
    admin = settings.admin_token.get_secret_value() if settings.admin_token else None
    worker = settings.worker_token.get_secret_value() if settings.worker_token else None
    if admin is None and worker is None:
        return
    token = _presented(request)
    if token is None:
        raise ApiError(401, "unauthorized", "missing 'Authorization: Bearer <token>' header")
    if _matches(token, admin) or (not admin_only and _matches(token, worker)):
        return
    if admin_only and admin is None:
        raise ApiError(403, "forbidden", "operator routes need an admin token, and none is "
                       "configured (--admin-token)")
    raise ApiError(403, "forbidden",
                   "this token may not call this route" if admin_only else "invalid token")


def token_allowed(settings: Settings, authorization: bytes | None) -> bool:
    """True when an ``Authorization`` header value may call worker routes."""
    admin = settings.admin_token.get_secret_value() if settings.admin_token else None
    worker = settings.worker_token.get_secret_value() if settings.worker_token else None
    if admin is None and worker is None:
        return True
    if authorization is None:
        return False
    scheme, _, token = authorization.decode("latin-1").partition(" ")
    token = token.strip()
    return scheme.lower() == "bearer" and (_matches(token, admin) or _matches(token, worker))


LEASE_TOKEN_HEADER = "Coxswain-Lease-Token"


def lease_token(request: Request) -> str | None:
    """The lease token a processor's call carries (issued by its registration)."""
    return request.headers.get(LEASE_TOKEN_HEADER)


def is_admin(request: Request) -> bool:
    """Whether the call is an operator's, not a processor's: it carries the admin token,
    or no token is configured at all (an open deployment: loopback or ``--insecure``,
    where every route is open and every caller may act as an operator)."""
    settings: Settings = request.app.state.settings
    admin = settings.admin_token.get_secret_value() if settings.admin_token else None
    if admin is None and settings.worker_token is None:
        return True
    token = _presented(request)
    return token is not None and _matches(token, admin)


async def require_worker(request: Request) -> None:
    """Dependency of worker routes."""
    _check(request, admin_only=False)


async def require_admin(request: Request) -> None:
    """Dependency of operator routes."""
    _check(request, admin_only=True)


class AuthFirstRoute(APIRoute):
    """A route whose token check runs before its body is read: FastAPI parses a body
    before it resolves dependencies, so without this a caller with no token would learn
    how its JSON is malformed (400/422) instead of getting 401/403."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, StarletteResponse]]:
        """The route's handler behind its auth dependencies (they run again inside, at no
        cost: the check is a comparison)."""
        handler = super().get_route_handler()
        gates = [d.dependency for d in self.dependencies
                 if d.dependency in (require_worker, require_admin)]
        if not gates:
            return handler

        async def gated(request: Request) -> StarletteResponse:
            for gate in gates:
                assert gate is not None
                await gate(request)
            return await handler(request)

        return gated
