"""The worker's coordinator client against real coordinators: with replicas listed, a
request that finds its replica down, or stopped and silent, goes to the next one."""

from __future__ import annotations

import socket
import time

import pytest

from service.local.ports import free_port
from tests.service.conftest import StartServer
from worker.client import CoordinatorClient


def test_requests_go_to_the_next_replica_when_one_is_down_or_silent(
    start_server: StartServer,
) -> None:
    server = start_server("--input", "kafka.orders:2", "--debounce-ms", "50")
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens
    silent = socket.socket()  # accepts connections, never answers (a SIGSTOPped replica)
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    hung = f"http://127.0.0.1:{silent.getsockname()[1]}"
    client = CoordinatorClient(f"{down},{hung},{server.url}", request_timeout_s=1.0,
                               base_delay_s=0.01)
    try:
        started = time.monotonic()
        reg = client.register("w1", "host-a")
        assert reg.processor_id == "w1"
        assert time.monotonic() - started < 10
        client.heartbeat("w1")  # stays on the replica that works, with its lease token
        assert client.urls[client._current % 3] == server.url
    finally:
        client.close()
        silent.close()


def test_requests_give_up_after_the_retry_window() -> None:
    client = CoordinatorClient(f"http://127.0.0.1:{free_port()}", retry_for_s=0.5,
                               base_delay_s=0.01)
    started = time.monotonic()
    with pytest.raises(ConnectionError, match="unavailable"):
        client.register("w1", "host-a")
    assert time.monotonic() - started < 5
    client.close()
