"""Other hosts for network faults (real network namespaces and veth pairs, as root): a
process in the namespace reaches root-namespace services at their loopback addresses, the
root namespace reaches a service inside at its loopback address, and a cut link is a
partition (connections time out; nothing refuses) until it is restored."""

from __future__ import annotations

import socket
import socketserver
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from service.local.ports import free_port
from tests.infra.netns import Host


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(1024):
            self.request.sendall(data)


CLIENT = """
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
    s.sendall(b"ping")
    print(s.recv(4).decode())
except OSError as e:
    print(type(e).__name__)
"""


def ask_from_inside(host: Host, port: int) -> str:
    out = host.popen([sys.executable, "-c", CLIENT, str(port)], stdout=subprocess.PIPE)
    stdout, _ = out.communicate(timeout=30)
    return stdout.decode().strip()


def test_a_host_reaches_services_across_a_link_that_can_be_cut(tmp_path: Path) -> None:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    outside = server.server_address[1]
    inside = free_port()
    host = Host(f"cxtest{inside % 1000}", 250, tmp_path)
    host.link("services", reach=(outside,)).link("exposed", expose=(inside,))
    echo_inside = None
    try:
        host.start()
        assert ask_from_inside(host, outside) == "ping"
        # a server inside the namespace, reached from here at its loopback address
        echo_inside = host.popen(
            [sys.executable, "-c", "import socketserver, sys\n"
             "class E(socketserver.BaseRequestHandler):\n"
             "    def handle(self):\n"
             "        self.request.sendall(self.request.recv(4))\n"
             f"socketserver.TCPServer(('127.0.0.1', {inside}), E).serve_forever()"])
        for _ in range(100):
            try:
                with socket.create_connection(("127.0.0.1", inside), timeout=2) as s:
                    s.sendall(b"pong")
                    if s.recv(4) == b"pong":
                        break
            except OSError:
                pass
            threading.Event().wait(0.1)
        else:
            pytest.fail("the service inside the namespace was never reached")
        host.cut("services")
        assert ask_from_inside(host, outside) in ("timeout", "TimeoutError")  # a partition
        host.restore("services")
        assert ask_from_inside(host, outside) == "ping"
    finally:
        if echo_inside is not None:
            echo_inside.kill()
            echo_inside.wait(10)
        host.stop()
        server.shutdown()
        server.server_close()
    names = subprocess.run(["ip", "netns", "list"], check=True, capture_output=True,
                           text=True).stdout
    assert host.name not in names  # nothing left behind
