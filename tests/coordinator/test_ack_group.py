"""Acks that arrive during a barrier write go together in the next one (group commit)."""

from __future__ import annotations

import asyncio

import pytest

from coordinator.ack_group import AckGroup
from coordinator.barrier import Barrier, BarrierState
from coordinator.errors import NotAParticipant, UnknownJobModelVersion


def test_acks_arriving_during_a_write_share_the_next_one() -> None:
    participants = frozenset(f"p{i}" for i in range(10))
    stored = {7: Barrier(7, BarrierState.PENDING, participants, frozenset(), 0.0)}
    writes: list[list[str]] = []

    async def write(version: int, ids: list[str]) -> tuple[Barrier | None, frozenset[str]]:
        writes.append(sorted(ids))
        await asyncio.sleep(0.01)  # the store's round trip: others queue meanwhile
        barrier = stored.get(version)
        if barrier is None:
            return None, frozenset()
        strangers = frozenset(ids) - barrier.participants
        stored[version] = barrier.ack_many(frozenset(ids) - strangers, 1.0)
        return stored[version], strangers

    async def scenario() -> list[object]:
        group = AckGroup(write)
        first = asyncio.gather(group.ack(7, "p0"), return_exceptions=True)
        await asyncio.sleep(0.002)  # its write is in flight now
        calls = [group.ack(7, pid) for pid in sorted(participants - {"p0"})]
        calls += [group.ack(7, "stranger"), group.ack(8, "p0")]
        rest = await asyncio.gather(*calls, return_exceptions=True)
        return [*(await first), *rest]

    results = asyncio.run(scenario())
    assert writes[0] == ["p0"]  # the first ack is written at once
    assert len(writes) == 3  # then everything that queued meanwhile, per version
    assert writes[1] == [*sorted(participants - {"p0"}), "stranger"]
    barriers = [b for b in results[:10] if isinstance(b, Barrier)]
    assert len(barriers) == 10
    assert barriers[-1].state is BarrierState.DONE
    assert stored[7].acked == participants
    assert isinstance(results[10], NotAParticipant)
    assert isinstance(results[11], UnknownJobModelVersion)


def test_a_failed_write_fails_each_ack_of_it() -> None:
    async def write(version: int, ids: list[str]) -> tuple[Barrier | None, frozenset[str]]:
        raise OSError("store unreachable")

    async def scenario() -> None:
        await AckGroup(write).ack(1, "p0")

    with pytest.raises(OSError, match="unreachable"):
        asyncio.run(scenario())
