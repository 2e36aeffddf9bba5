"""A TCP relay a test can cut and restore: clients connect to the relay's port, which
forwards each connection to a target. ``cut()`` closes the listening socket and every
relayed connection (clients then get connection refused, as from a server that went
away); ``restore()`` listens again on the same port. The server behind it keeps running
with its data: what a network outage between a client and its server looks like to the
client, without stopping the server. ``bytes_per_s`` caps what all its connections carry
together (a slow link), e.g. to keep a download going for a while."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time

from service.local.ports import free_port


class Relay:
    """One relay from ``host:port`` to ``target``."""

    def __init__(self, target: tuple[str, int], port: int | None = None,
                 host: str = "127.0.0.1", bytes_per_s: float | None = None) -> None:
        self.target = target
        self._bandwidth = Bandwidth(bytes_per_s) if bytes_per_s else None
        self.host = host
        self.port = port or free_port()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def endpoint(self) -> str:
        """The relay's URL (http)."""
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> Relay:
        self.restore()
        return self

    def __exit__(self, *_: object) -> None:
        self.cut()

    def restore(self) -> None:
        """Listen (again) and relay new connections."""
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(128)
            self._listener = listener
            self._stop.clear()
            self._thread = threading.Thread(target=self._accept, args=(listener,),
                                            daemon=True, name=f"relay-{self.port}")
            self._thread.start()

    def cut(self) -> None:
        """Stop listening and close every relayed connection."""
        with self._lock:
            listener, self._listener = self._listener, None
            self._stop.set()
            conns, self._open = self._open, set()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        if self._thread is not None:
            self._thread.join(5)

    def _accept(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._stop.is_set():
                    client.close()
                    upstream.close()
                    return
                self._open |= {client, upstream}
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        """Copy bytes both ways until either side closes."""
        sel = selectors.DefaultSelector()
        try:
            sel.register(a, selectors.EVENT_READ, b)
            sel.register(b, selectors.EVENT_READ, a)
            while True:
                for key, _ in sel.select(timeout=1.0):
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = src.recv(65536)
                    if not data:
                        return
                    if self._bandwidth is not None:
                        self._bandwidth.take(len(data), self._stop)
                    key.data.sendall(data)
                if self._stop.is_set():
                    return
        except OSError:
            return
        finally:
            sel.close()
            with self._lock:
                self._open -= {a, b}
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()


class Bandwidth:
    """A token bucket shared by a relay's connections: ``take(n)`` returns once ``n``
    bytes fit in the rate (at most a tenth of a second's worth may burst)."""

    def __init__(self, bytes_per_s: float) -> None:
        self._rate = bytes_per_s
        self._lock = threading.Lock()
        self._allowed = time.monotonic()  # when the bucket is next empty

    def take(self, n: int, stop: threading.Event) -> None:
        with self._lock:
            now = time.monotonic()
            self._allowed = max(self._allowed, now - 0.1) + n / self._rate
            wait_s = self._allowed - now
        if wait_s > 0:
            stop.wait(wait_s)


def main() -> None:
    """Run relays until SIGTERM: ``python -m tests.infra.relay HOST:PORT=HOST:PORT ...``
    (listen=target), e.g. inside a network namespace (``tests.infra.netns``)."""
    import signal
    import sys

    relays = []
    for spec in sys.argv[1:]:
        listen, _, target = spec.partition("=")
        lhost, _, lport = listen.rpartition(":")
        thost, _, tport = target.rpartition(":")
        relays.append(Relay((thost, int(tport)), int(lport), lhost))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    for relay in relays:
        relay.restore()
    print("relaying", " ".join(sys.argv[1:]), flush=True)
    done.wait()
    for relay in relays:
        relay.cut()


if __name__ == "__main__":
    main()
