"""A minimal HTTP/1.1 keep-alive client for simulating a thousand processors in one process.

httpx costs about a millisecond of CPU per request; 1000 simulated processors heartbeating
every 2 s, long-polling and acking every version saturated the simulating process, whose
heartbeats then came late enough to lose leases: the bench measured itself. This client
sends a request on one persistent connection and reads a Content-Length response (what the
coordinator sends), nothing else: no redirects, no chunked bodies; TLS when given an
SSL context (the connection's handshake once, then requests on it).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any


class HttpError(Exception):
    """The connection failed or the answer was not an HTTP/1.1 Content-Length response."""


class MiniConnection:
    """One keep-alive connection; requests on it run one at a time (a lock), and a
    connection the server closed is opened again for the next request."""

    def __init__(self, host: str, port: int, ssl: Any = None) -> None:
        self._host, self._port = host, port
        self._ssl = ssl
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def request(self, method: str, path: str, body: Any = None,
                      headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """(status, body bytes). A request that finds its idle connection closed by the
        server (before any answer byte) is sent once more on a new connection."""
        async with self._lock:
            fresh = self._writer is None
            try:
                return await self._exchange(method, path, body, headers)
            except (ConnectionError, asyncio.IncompleteReadError, HttpError):
                self._close()
                if fresh:
                    raise
            try:
                return await self._exchange(method, path, body, headers)
            except (ConnectionError, asyncio.IncompleteReadError) as e:
                self._close()
                raise HttpError(f"{method} {path}: {type(e).__name__}") from e

    async def _exchange(self, method: str, path: str, body: Any,
                        headers: dict[str, str] | None) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(
                self._host, self._port, ssl=self._ssl)
        reader, writer = self._reader, self._writer
        assert reader is not None
        payload = b"" if body is None else json.dumps(body).encode()
        head = [f"{method} {path} HTTP/1.1", f"Host: {self._host}:{self._port}",
                f"Content-Length: {len(payload)}"]
        if body is not None:
            head.append("Content-Type: application/json")
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
        await writer.drain()
        status_line = await reader.readuntil(b"\r\n")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise HttpError(f"not an HTTP response: {status_line[:80]!r}")
        status = int(parts[1])
        length = 0
        close = False
        while True:
            line = await reader.readuntil(b"\r\n")
            if line == b"\r\n":
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                raise HttpError("chunked responses are not supported")
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        data = await reader.readexactly(length) if length else b""
        if close:
            self._close()
        return status, data

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def aclose(self) -> None:
        async with self._lock:
            self._close()
