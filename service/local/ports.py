"""Free loopback ports, the cache folder, and stopping a process by its pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path


def free_port() -> int:
    """A TCP port nobody listens on right now (on 127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cache_dir() -> Path:
    """Where downloads and service data go: ``$COXSWAIN_CACHE_DIR`` or the checkout's
    git-ignored ``.cache/``."""
    configured = os.environ.get("COXSWAIN_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / ".cache"


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
