"""Fixtures: coordinator processes started per test and always stopped (by pid)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.service.server import Server

StartServer = Callable[..., Server]


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """``start_server(*args, data_dir=None, env=None)`` -> a running coordinator."""
    started: list[Server] = []

    def start(*args: str, data_dir: Path | None = None,
              env: dict[str, str] | None = None) -> Server:
        server = Server(data_dir or tmp_path, list(args), env or {})
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()
