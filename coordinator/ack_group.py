"""Acks of a version written together (group commit).

After each publication every processor of the new model acks at once. Written one by one,
each ack read, changed and wrote the whole barrier (all participants and acks) under the
coordinator's lock: at 1000 processors a million participant entries went through JSON
per rebalance, and heartbeats queued behind the lock long enough to lose leases. Here
the acks that arrive while one write is in flight wait for it and go in the next write,
together; each caller is answered once the write holding its ack is stored, so an
answered ack is as durable as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from coordinator.barrier import Barrier
from coordinator.errors import NotAParticipant, UnknownJobModelVersion

#: Writes the acks of ``processor ids`` into version's barrier; returns the barrier as
#: stored (None: the version has none) and the ids that are not its participants.
WriteAcks = Callable[[int, list[str]], Awaitable[tuple[Barrier | None, frozenset[str]]]]


class AckGroup:
    """One writer at a time; acks queue per version meanwhile."""

    def __init__(self, write: WriteAcks) -> None:
        self._write = write
        self._pending: dict[int, list[tuple[str, asyncio.Future[Barrier]]]] = {}
        self._writer: asyncio.Task[None] | None = None

    async def ack(self, version: int, processor_id: str) -> Barrier:
        """The barrier once this ack is stored. Raises NotAParticipant or
        UnknownJobModelVersion as a single ack would."""
        future: asyncio.Future[Barrier] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(version, []).append((processor_id, future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        while self._pending:
            version = min(self._pending)
            batch = self._pending.pop(version)
            try:
                barrier, strangers = await self._write(version, [pid for pid, _ in batch])
            except Exception as e:  # e.g. the store is unreachable: each caller learns it
                for _, future in batch:
                    if not future.done():
                        future.set_exception(e)
                continue
            for pid, future in batch:
                if future.done():  # its caller went away; the ack is stored all the same
                    continue
                if barrier is None:
                    future.set_exception(UnknownJobModelVersion(f"no job model version {version}"))
                elif pid in strangers:
                    future.set_exception(NotAParticipant(
                        f"processor {pid!r} is not part of version {version}"))
                else:
                    future.set_result(barrier)
