"""Where Coxswain keeps downloads and local service data."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$COXSWAIN_CACHE_DIR``, or the checkout's git-ignored ``.cache/``."""
    configured = os.environ.get("COXSWAIN_CACHE_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[1] / ".cache"
