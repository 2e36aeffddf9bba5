"""Kinesis shards as partitions: ids, ListShards entries, the job model config's form."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grouping.shards import (
    MAX_HASH_KEY,
    Shard,
    ShardFormatError,
    lineage_of_config,
    lineage_to_config,
    shard_from_listing,
    shard_id,
    shard_partition,
    shards_from_listing,
)

SEQ = "49680495734749429435897711455540000172574159447972118530"  # 56 digits, as Kinesis


def test_ids_are_partitions() -> None:
    assert shard_partition("shardId-000000000007") == 7
    assert shard_id(7) == "shardId-000000000007"
    for bad in ("shard-7", "shardId-", "shardId-x1", "shardId--1", "7", "shardId-" + "9" * 19):
        with pytest.raises(ShardFormatError):
            shard_partition(bad)


def test_a_listing_gives_lineage_and_ranges() -> None:
    listing = [
        {"ShardId": "shardId-000000000000",
         "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(MAX_HASH_KEY)},
         "SequenceNumberRange": {"StartingSequenceNumber": SEQ,
                                 "EndingSequenceNumber": SEQ + "9"}},
        {"ShardId": "shardId-000000000002", "ParentShardId": "shardId-000000000000",
         "AdjacentParentShardId": "shardId-000000000001",
         "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "5"},
         "SequenceNumberRange": {"StartingSequenceNumber": "7"}},
    ]
    shards = shards_from_listing(listing)
    assert shards[0] == Shard(0, (), (0, MAX_HASH_KEY), int(SEQ), int(SEQ + "9"))
    assert shards[0].closed and shards[0].end_offset == int(SEQ + "9") + 1
    assert shards[2].parents == (0, 1) and not shards[2].closed


@pytest.mark.parametrize("broken", [
    {"HashKeyRange": {"StartingHashKey": "9", "EndingHashKey": "1"}},
    {"HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": str(2**128)}},
    {"SequenceNumberRange": {"StartingSequenceNumber": "-1"}},
    {"SequenceNumberRange": {"StartingSequenceNumber": "1" * 129}},
    {"ShardId": "nope"},
])
def test_impossible_shards_are_refused(broken: dict[str, object]) -> None:
    item = {"ShardId": "shardId-000000000000",
            "HashKeyRange": {"StartingHashKey": "0", "EndingHashKey": "10"},
            "SequenceNumberRange": {"StartingSequenceNumber": "1"}, **broken}
    with pytest.raises(ShardFormatError):
        shard_from_listing(item)


shards = st.builds(
    lambda p, parents, lo, span, start, end: Shard(
        p, tuple(sorted(set(parents))), (lo, min(MAX_HASH_KEY, lo + span)), start,
        None if end is None else start + end),
    st.integers(0, 10**6), st.lists(st.integers(0, 10**6), max_size=2),
    st.integers(0, MAX_HASH_KEY), st.integers(0, MAX_HASH_KEY), st.integers(0, 10**60),
    st.none() | st.integers(0, 10**60))


@given(st.dictionaries(st.sampled_from(["orders", "clicks"]), st.lists(shards, max_size=5)))
def test_lineage_round_trips_through_the_job_model_config(
        streams: dict[str, list[Shard]]) -> None:
    lineage = {("kinesis", name): {s.partition: s for s in items}
               for name, items in streams.items()}
    assert lineage_of_config({"shards": lineage_to_config(lineage)}) == lineage
