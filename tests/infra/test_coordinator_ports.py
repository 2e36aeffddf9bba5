"""The test harness's coordinator (``tests/service/server.py``) when the free port it
picked is taken before the server binds it: a real socket on that port, a real server."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx

from tests.service.server import Server


def test_a_first_start_whose_port_was_taken_moves_to_another(tmp_path: Path) -> None:
    server = Server(tmp_path, [])
    taken = server.port
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", taken))
    squatter.listen()
    try:
        server.start()
        try:
            assert server.port != taken and server.answered
            assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
        finally:
            server.stop()
    finally:
        squatter.close()
