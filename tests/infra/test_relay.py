"""The relay the outage tests cut: connections pass through, a cut refuses new ones and
closes open ones, a restore relays again on the same port."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from tests.infra.relay import Relay


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(1024):
            self.request.sendall(data)


def test_a_cut_refuses_and_closes_and_a_restore_relays_again() -> None:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with Relay(server.server_address) as relay:  # type: ignore[arg-type]
            open_conn = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
            open_conn.sendall(b"hello")
            assert open_conn.recv(5) == b"hello"
            relay.cut()
            assert open_conn.recv(5) == b""  # closed under the client
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", relay.port), timeout=5)
            relay.restore()
            again = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
            again.sendall(b"back")
            assert again.recv(4) == b"back"
            again.close()
            open_conn.close()
    finally:
        server.shutdown()
        server.server_close()


def test_a_capped_relay_carries_no_more_than_its_rate() -> None:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with Relay(server.server_address, bytes_per_s=1_000_000) as relay:  # type: ignore[arg-type]
            conn = socket.create_connection(("127.0.0.1", relay.port), timeout=10)
            payload = b"x" * 500_000  # echoed: 1 MB through the relay in all
            started = time.monotonic()
            conn.sendall(payload)
            got = 0
            while got < len(payload):
                got += len(conn.recv(65536))
            took = time.monotonic() - started
            conn.close()
        assert took >= 0.8, took  # 1 MB at 1 MB/s, less the 0.1 s burst
    finally:
        server.shutdown()
        server.server_close()
