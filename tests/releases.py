"""An earlier release's source, from this clone's history, to run beside this one: its
stores and state are what an upgrade meets."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the last release before the job's key hash: its stores are crc32 jobs
BEFORE_KEY_HASH = "237d9437591c50ce3e6fafef4065a7c1439682fa"
#: what running its coordinator and workers takes (the tests' apps included)
SOURCES = ("common", "grouping", "checkpoint", "coordinator", "service", "migrations",
           "worker", "deploy/local/spark", "tests/__init__.py", "tests/worker/__init__.py",
           "tests/worker/apps.py")


def release_source(commit: str, where: Path) -> Path:
    """``commit``'s source under ``where/src``. Run it with ``env -C`` that folder: its
    modules come first on ``python -m``'s path; ``COXSWAIN_CACHE_DIR`` pointed at this
    checkout's cache lends it the connector jars."""
    archive = where / "src.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), commit,
                    *SOURCES], check=True, timeout=60)
    with tarfile.open(archive) as tar:
        tar.extractall(where / "src", filter="data")
    return where / "src"
