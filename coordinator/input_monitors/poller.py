"""What the input monitors share: poll every interval (or at once when asked), keep each
stream's last seen state for ``/status``, and log it once per change.

``coordinator.input_monitors.partitions`` polls Kafka partition counts,
``coordinator.input_monitors.shards`` Kinesis shard listings; both run on every replica
and act only on the leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

log = logging.getLogger("coxswain.inputs")


class SourceUnavailable(Exception):
    """The partition source (the Kafka cluster) could not be asked."""


class InputState(StrEnum):
    """What the monitor last saw of a stream."""

    UNKNOWN = "unknown"  # not polled successfully yet
    OK = "ok"
    MISSING = "missing"
    UNREACHABLE = "unreachable"
    SHRUNK = "shrunk"  # refused until an operator resolves it


@dataclass(frozen=True, slots=True)
class StreamStatus:
    """One monitored stream in ``/status``."""

    system: str
    stream: str
    partitions: int | None  # the count the job uses
    observed: int | None  # the count last seen in Kafka
    state: InputState
    detail: str = ""


class InputPoller:
    """A polling loop over some streams, with their last seen state; subclasses say what
    one poll does (:meth:`poll_once`)."""

    def __init__(self, system_streams: Iterable[tuple[str, str]], interval_s: float,
                 is_leader: Callable[[], bool], name: str) -> None:
        self._streams = sorted(set(system_streams))
        self._interval_s = interval_s
        self._is_leader = is_leader
        self._name = name
        self._status: dict[tuple[str, str], StreamStatus] = {
            (sys, st): StreamStatus(sys, st, None, None, InputState.UNKNOWN)
            for sys, st in self._streams}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def status(self) -> list[StreamStatus]:
        """The last seen state of every monitored stream."""
        return [self._status[k] for k in self._streams]

    def start(self) -> None:
        """Poll now and then every interval, until :meth:`stop`."""
        self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        """Stop polling."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def poll_soon(self) -> None:
        """Poll without waiting for the interval (e.g. on becoming the leader)."""
        self._wake.set()

    async def poll_once(self) -> None:
        """One poll of every stream."""
        raise NotImplementedError

    def _set(self, status: StreamStatus) -> None:
        """Record what a poll saw of a stream; log it when it changed."""
        key = (status.system, status.stream)
        before = self._status.get(key)
        self._status[key] = status
        seen = (status.state, status.observed, status.detail)
        if before is None or (before.state, before.observed, before.detail) != seen:
            level = logging.INFO if status.state is InputState.OK else logging.WARNING
            log.log(level, "input %s.%s: %s, %s partitions%s", status.system, status.stream,
                    status.state.value, status.observed,
                    f" ({status.detail})" if status.detail else "")

    async def _run(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception:
                log.exception("%s: poll failed", self._name)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval_s)
