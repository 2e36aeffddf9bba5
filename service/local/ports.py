"""Free loopback ports."""

from __future__ import annotations

import os
import socket
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
