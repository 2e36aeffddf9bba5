"""Free loopback ports, waiting for a local HTTP service, and stopping a process by its
pid."""

from __future__ import annotations

import signal
import socket
import subprocess
import time

import httpx


def free_port() -> int:
    """A TCP port nobody listens on right now (on 127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_answering(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """True once ``url`` answers 200; False when ``proc`` (the server) exits first or
    ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url, timeout=0.5).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return False


def stop_process(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM,
                 grace_s: float = 15.0) -> None:
    """Signal ``proc`` (by its pid) and wait; SIGKILL if it outlives ``grace_s``."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(15)
