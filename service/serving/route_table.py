"""Every API route of an app, whichever way FastAPI keeps included routers (newer versions
wrap each in an object holding the original router instead of copying its routes)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from fastapi.routing import APIRoute
from starlette.routing import BaseRoute


def api_routes(routes: Iterable[BaseRoute]) -> Iterator[APIRoute]:
    """The ``APIRoute`` objects among ``routes`` and inside included routers."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        else:
            included = getattr(route, "original_router", None)
            if included is not None:
                yield from api_routes(included.routes)
