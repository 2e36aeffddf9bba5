"""The shard monitor's decisions, over listings as ListShards gives them (the Kinesis side
is tested on a real local Kinesis in tests/service/test_kinesis_inputs.py; trimming after
retention cannot be made to happen there, so its listing is written out here)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from coordinator.input_monitors.poller import InputState, SourceUnavailable
from coordinator.input_monitors.shards import ShardMonitor
from grouping.shards import MAX_HASH_KEY, Shard


def entry(p: int, parents: tuple[int, ...] = (), ending: str | None = None,
          span: tuple[int, int] = (0, MAX_HASH_KEY)) -> dict[str, Any]:
    item: dict[str, Any] = {
        "ShardId": f"shardId-{p:012d}",
        "HashKeyRange": {"StartingHashKey": str(span[0]), "EndingHashKey": str(span[1])},
        "SequenceNumberRange": {"StartingSequenceNumber": str(100 * (p + 1))}}
    if ending:
        item["SequenceNumberRange"]["EndingSequenceNumber"] = ending
    for key, parent in zip(("ParentShardId", "AdjacentParentShardId"), parents, strict=False):
        item[key] = f"shardId-{parent:012d}"
    return item


class Listings:
    """What ListShards answers, poll after poll."""

    def __init__(self, *answers: list[dict[str, Any]] | Exception | None) -> None:
        self.answers = list(answers)

    def list_shards(self, stream: str) -> list[Mapping[str, Any]] | None:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return None if answer is None else list(answer)


def run(source: Listings, polls: int, leader: bool = True
        ) -> tuple[list[dict[int, Shard]], ShardMonitor]:
    applied: list[dict[int, Shard]] = []

    async def apply(system: str, stream: str, shards: Mapping[int, Shard]) -> None:
        applied.append(dict(shards))

    monitor = ShardMonitor([("kinesis", "orders")], source, 1.0, apply, lambda: leader)

    async def go() -> None:
        for _ in range(polls):
            await monitor.poll_once()

    asyncio.run(go())
    return applied, monitor


def test_a_reshard_then_the_parents_trimming_are_applied_as_listed() -> None:
    half = MAX_HASH_KEY // 2
    applied, monitor = run(Listings(
        [entry(0)],
        [entry(0, ending="999"), entry(1, (0,), span=(0, half)),
         entry(2, (0,), span=(half + 1, MAX_HASH_KEY))],
        [entry(1, (0,), span=(0, half)), entry(2, (0,), span=(half + 1, MAX_HASH_KEY))],
    ), 3)
    assert [sorted(a) for a in applied] == [[0], [0, 1, 2], [1, 2]]
    assert applied[1][0].ending_sequence == 999 and applied[1][1].parents == (0,)
    status = monitor.status()[0]
    assert (status.state, status.partitions) == (InputState.OK, 2)
    assert status.detail == "2 open shards, 0 closed"


def test_a_missing_stream_or_an_outage_applies_nothing() -> None:
    applied, monitor = run(Listings(None, SourceUnavailable("Kinesis unreachable: boom"),
                                    [entry(0)]), 2)
    assert applied == []
    assert monitor.status()[0].state is InputState.UNREACHABLE
    assert "boom" in monitor.status()[0].detail


def test_followers_report_but_do_not_apply() -> None:
    applied, monitor = run(Listings([entry(0), entry(1, span=(0, 5))]), 1, leader=False)
    assert applied == [] and monitor.status()[0].observed == 2


def test_an_impossible_listing_is_refused_not_applied() -> None:
    broken = entry(0)
    broken["HashKeyRange"]["EndingHashKey"] = str(2**128)
    applied, monitor = run(Listings([broken]), 1)
    assert applied == [] and monitor.status()[0].state is InputState.UNREACHABLE
