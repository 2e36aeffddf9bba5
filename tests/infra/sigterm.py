"""A pytest plugin: SIGTERM to the test run stops it as Ctrl-C does.

Python's default SIGTERM ends the process at once, so a run stopped by a supervisor (a
CI timeout, ``kill PID``, ``timeout``) ran no ``finally`` block and no fixture's
teardown, and left behind everything the tests had started: the session's Kafka broker
and ZooKeeper, a chaos run's replicas, workers and network namespaces. Raised as
``KeyboardInterrupt`` in the main thread instead, it unwinds the running test's
``finally`` blocks (each stops what it started, by pid) and pytest then tears down every
fixture, as after Ctrl-C.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import pytest


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # once: a second SIGTERM while the teardown runs must not cut the teardown short.
    # Swallowed by a handler, not SIG_IGN: an ignored signal stays ignored in every
    # process the teardown starts, a handler does not survive their exec
    signal.signal(signal.SIGTERM, _swallow)
    raise KeyboardInterrupt(f"signal {signum}: stopping the test run")


def _swallow(signum: int, frame: FrameType | None) -> None:
    """A SIGTERM while the run already stops: nothing more to do."""


def install() -> None:
    """From now on SIGTERM interrupts the run (from the main thread only: a signal
    handler cannot be set elsewhere)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


def pytest_configure(config: pytest.Config) -> None:  # as a plugin: ``-p tests.infra.sigterm``
    install()
