"""The local Kinesis server does what resharding tests rely on (what moto's does not):
after a split, new records go to the children; a drained closed parent ends (no next
iterator); a merge names both parents; sequence numbers outgrow 64-bit integers."""

from __future__ import annotations

import time
import uuid
from typing import Any

import boto3
import pytest

from service.local.kinesis import CREDENTIALS, LocalKinesis


@pytest.fixture
def client(kinesis: LocalKinesis) -> Any:
    return boto3.client("kinesis", endpoint_url=kinesis.endpoint,
                        region_name=CREDENTIALS["AWS_REGION"],
                        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])


def wait_active(client: Any, stream: str, timeout_s: float = 10) -> None:
    """Until ``stream`` is ACTIVE again: creating and resharding are asynchronous, in
    Kinesis and in kinesalite."""
    deadline = time.monotonic() + timeout_s
    while client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"][
            "StreamStatus"] != "ACTIVE":
        assert time.monotonic() < deadline, f"{stream} not ACTIVE in {timeout_s}s"
        time.sleep(0.02)


def _shards(client: Any, stream: str) -> dict[str, dict[str, Any]]:
    return {s["ShardId"]: s for s in client.list_shards(StreamName=stream)["Shards"]}


def _drain(client: Any, stream: str, shard: str) -> tuple[list[dict[str, Any]], bool]:
    """Every record of ``shard`` and whether the shard ended (no next iterator)."""
    it = client.get_shard_iterator(StreamName=stream, ShardId=shard,
                                   ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    records: list[dict[str, Any]] = []
    for _ in range(20):
        out = client.get_records(ShardIterator=it, Limit=1000)
        records += out["Records"]
        it = out.get("NextShardIterator")
        if it is None:
            return records, True
        if not out["Records"] and out.get("MillisBehindLatest", 0) == 0 and records:
            return records, False  # open: caught up
    return records, False  # (an empty page is no end: a closed shard ends by no iterator)


def test_split_routes_new_records_to_children_and_ends_the_parent(client: Any) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    client.create_stream(StreamName=stream, ShardCount=1)
    wait_active(client, stream)
    keys = [f"key-{i}" for i in range(40)]
    for k in keys:
        client.put_record(StreamName=stream, PartitionKey=k, Data=b"before")
    parent = "shardId-000000000000"
    client.split_shard(StreamName=stream, ShardToSplit=parent,
                       NewStartingHashKey=str(2**127))
    wait_active(client, stream)
    shards = _shards(client, stream)
    children = sorted(s for s, v in shards.items() if v.get("ParentShardId") == parent)
    assert len(children) == 2
    assert "EndingSequenceNumber" in shards[parent]["SequenceNumberRange"]
    for k in keys:
        client.put_record(StreamName=stream, PartitionKey=k, Data=b"after")
    before, ended = _drain(client, stream, parent)
    assert [r["Data"] for r in before] == [b"before"] * 40 and ended
    after = [r for c in children for r in _drain(client, stream, c)[0]]
    assert sorted(r["PartitionKey"] for r in after) == sorted(keys)
    assert all(r["Data"] == b"after" for r in after)
    assert all(_drain(client, stream, c)[0] for c in children)  # both children got keys
    # sequence numbers are decimal strings beyond int64: no int64 on the offset path
    assert int(before[0]["SequenceNumber"]) > 2**63


def test_merge_names_both_parents(client: Any) -> None:
    stream = f"s-{uuid.uuid4().hex[:8]}"
    client.create_stream(StreamName=stream, ShardCount=2)
    wait_active(client, stream)
    first, second = sorted(_shards(client, stream))
    client.merge_shards(StreamName=stream, ShardToMerge=first, AdjacentShardToMerge=second)
    wait_active(client, stream)
    shards = _shards(client, stream)
    merged = [v for v in shards.values() if v.get("AdjacentParentShardId")]
    assert len(merged) == 1
    assert {merged[0]["ParentShardId"], merged[0]["AdjacentParentShardId"]} == {first, second}
    client.put_record(StreamName=stream, PartitionKey="k", Data=b"x")
    assert _drain(client, stream, merged[0]["ShardId"])[0]
    assert _drain(client, stream, first) == ([], True)
