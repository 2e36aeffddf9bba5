"""Structured logs: plain text by default, one JSON object per line with ``--log-json``.

Records about rebalances carry ``reason`` and ``version`` (passed as ``extra``); both
formats print them.
"""

from __future__ import annotations

import json
import logging
import sys
import time

_EXTRAS = ("reason", "version")
#: libraries logging every request or call at INFO (each heartbeat and poll, each py4j
#: callback of a batch): they buried a worker's own lines (1 007 of a run's 1 188), so
#: they log warnings only unless ``--log-level`` names them (``INFO,httpx=INFO``)
QUIET = ("uvicorn.access", "httpx", "httpcore", "py4j")


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as JSON."""
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in _EXTRAS:
            if hasattr(record, key):
                out[key] = getattr(record, key)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


class TextFormatter(logging.Formatter):
    """``time level logger [reason=… version=…] message``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of text."""
        line = super().format(record)
        extras = " ".join(f"{k}={getattr(record, k)}" for k in _EXTRAS if hasattr(record, k))
        return f"{line} [{extras}]" if extras else line


def parse_levels(spec: str) -> tuple[str, dict[str, str]]:
    """``INFO`` or ``INFO,coxswain.worker.batches=DEBUG``: the root level, then per-logger
    overrides. Raises ``ValueError`` naming what is wrong (a typo must not silently log
    nothing)."""
    root, *rest = [part.strip() for part in spec.split(",")]
    overrides: dict[str, str] = {}
    for part in rest:
        name, sep, level = part.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"log level {part!r}: expected LOGGER=LEVEL")
        overrides[name.strip()] = level.strip().upper()
    for level in (root.upper(), *overrides.values()):
        if not isinstance(logging.getLevelName(level), int):
            raise ValueError(f"unknown log level {level!r} (DEBUG, INFO, WARNING, ERROR)")
    return root.upper(), overrides


def configure(json_lines: bool, level: str) -> None:
    """Send every log record to stderr in the chosen format; ``level`` as
    :func:`parse_levels` reads it."""
    root_level, overrides = parse_levels(level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(root_level)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    for name, lvl in overrides.items():
        logging.getLogger(name).setLevel(lvl)
