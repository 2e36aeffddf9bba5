"""uvicorn's HTTP protocol with a deadline for request headers.

uvicorn times out idle keep-alive connections, but any byte cancels that timer, so a
client that sends its headers a byte at a time (slowloris) holds a connection for as long
as it likes, and a thousand of them hold a thousand. Here each connection must complete
its request headers within ``header_timeout_s`` of connecting or of its previous response;
otherwise it is closed. (Bodies have their own deadline: ``service.app.BodyLimit``.)
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def header_timeout_protocol(header_timeout_s: float) -> type[HttpToolsProtocol]:
    """A protocol class for ``uvicorn.run(http=...)`` closing slow-header connections."""

    class HeaderDeadlineProtocol(HttpToolsProtocol):
        _header_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's headers get the same deadline

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._header_deadline = self.loop.call_later(header_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None

        def _expire(self) -> None:
            self._header_deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadlineProtocol


def protocol_options(header_timeout_s: float) -> dict[str, Any]:
    """``uvicorn.run`` keyword arguments: the deadline protocol where httptools (part of
    ``uvicorn[standard]``) is installed, uvicorn's default otherwise."""
    try:
        import httptools  # noqa: F401, PLC0415
    except ImportError:
        return {}
    return {"http": header_timeout_protocol(header_timeout_s)}
