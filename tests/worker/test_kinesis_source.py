"""The Kinesis source's shard reading, on a real local Kinesis API (kinesalite): records in
order from each kind of start, per-shard limits, the end marker of a split parent, and an
exact replay of a batch."""

from __future__ import annotations

import json
import pickle
import uuid
from typing import Any

import pytest

from service.local.kinesis import CREDENTIALS, LocalKinesis
from tests.service.test_kinesis_inputs import kinesis_client, wait_active
from worker.kinesis_source import EARLIEST, KinesisStreamReader, ShardReader, offset_key


def _stream(client: Any, shards: int) -> str:
    name = f"src-{uuid.uuid4().hex[:8]}"
    client.create_stream(StreamName=name, ShardCount=shards)
    wait_active(client, name)
    return name


def _put(client: Any, stream: str, n: int, tag: str = "") -> list[str]:
    """n records with keys k0..; their sequence numbers, in order."""
    return [client.put_record(StreamName=stream, PartitionKey=f"k{i}",
                              Data=f"{tag}{i}".encode())["SequenceNumber"] for i in range(n)]


def test_reads_in_order_from_earliest_and_from_a_committed_offset(
        kinesis: LocalKinesis) -> None:
    client = kinesis_client(kinesis)
    stream = _stream(client, 1)
    seqs = _put(client, stream, 30)
    reader = ShardReader(client, stream, {0: None})
    first = reader.read(0, EARLIEST, limit=1000)
    assert [r[5] for r in first.rows] == seqs and not first.ended
    assert first.next_offset == str(int(seqs[-1]) + 1)
    assert [r[1] for r in first.rows][:2] == [b"0", b"1"] and first.rows[0][0] == b"k0"
    assert all(r[6] == offset_key(int(r[5])) and len(r[6]) == 128 for r in first.rows)
    assert reader.read(0, first.next_offset, limit=1000).rows == []  # caught up
    more = _put(client, stream, 5, "m")
    again = reader.read(0, first.next_offset, limit=1000)
    assert [r[5] for r in again.rows] == more
    # a fresh reader (another processor) from a committed offset: only what follows it
    other = ShardReader(client, stream, {0: None}).read(0, str(int(seqs[9]) + 1), limit=1000)
    assert [r[5] for r in other.rows] == seqs[10:] + more


def test_a_limit_splits_reading_without_loss(kinesis: LocalKinesis) -> None:
    client = kinesis_client(kinesis)
    stream = _stream(client, 1)
    seqs = _put(client, stream, 25)
    reader, offset, got = ShardReader(client, stream, {0: None}), EARLIEST, []
    for _ in range(3):
        part = reader.read(0, offset, limit=10)
        assert len(part.rows) <= 10
        got += [r[5] for r in part.rows]
        offset = part.next_offset
    assert got == seqs


def test_a_split_parent_ends_with_a_marker_at_its_ending_sequence_number(
        kinesis: LocalKinesis) -> None:
    client = kinesis_client(kinesis)
    stream = _stream(client, 1)
    before = _put(client, stream, 10)
    client.split_shard(StreamName=stream, ShardToSplit="shardId-000000000000",
                       NewStartingHashKey=str(2**127))
    wait_active(client, stream)
    ending = int(next(s for s in client.list_shards(StreamName=stream)["Shards"]
                      if s["ShardId"] == "shardId-000000000000")[
        "SequenceNumberRange"]["EndingSequenceNumber"])
    after = _put(client, stream, 10, "a")
    # the reader's lineage predates the split: it learns the ending from ListShards
    reader = ShardReader(client, stream, {0: None, 1: None, 2: None})
    parent = reader.read(0, EARLIEST, limit=1000)
    assert [r[5] for r in parent.rows[:-1]] == before
    marker = parent.rows[-1]
    assert marker[8] is True and marker[0] is None and int(marker[5]) == ending
    assert parent.ended and parent.next_offset == str(ending + 1)
    # finished: nothing more, and no second marker
    assert reader.read(0, parent.next_offset, limit=1000) == (
        type(parent)([], str(ending + 1), True))
    children = [r[5] for p in (1, 2) for r in reader.read(p, EARLIEST, limit=1000).rows]
    assert sorted(children, key=int) == sorted(after, key=int)
    # a replay of the parent's batch gives the same rows, marker included
    replay = ShardReader(client, stream, {0: ending}).read(0, EARLIEST, 2**31,
                                                           until=ending + 1)
    assert replay.rows == parent.rows


def test_a_replay_stops_at_the_batch_end(kinesis: LocalKinesis) -> None:
    client = kinesis_client(kinesis)
    stream = _stream(client, 1)
    seqs = _put(client, stream, 20)
    until = int(seqs[11]) + 1  # the batch ended after the 12th record
    replay = ShardReader(client, stream, {0: None}).read(0, EARLIEST, 2**31, until=until)
    assert [r[5] for r in replay.rows] == seqs[:12] and replay.next_offset == str(until)


def test_the_spark_reader_plans_a_partition_per_shard_and_replays_exactly(
        kinesis: LocalKinesis, monkeypatch: pytest.MonkeyPatch) -> None:
    """``KinesisStreamReader`` as Spark drives it (no Spark needed): the latest offset
    reads ahead and each shard's records go to its own input partition; after a restart
    (a fresh reader, nothing kept) the same batch is read again from Kinesis, row for row;
    the reader pickles (Spark ships it to its tasks)."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    client = kinesis_client(kinesis)
    stream = _stream(client, 2)
    _put(client, stream, 40)
    options = {"stream": stream, "endpoint": kinesis.endpoint, "region": "us-east-1",
               "maxRecordsPerShard": "15", "shards": json.dumps(
                   {"0": {"start": "earliest", "ending": None},
                    "1": {"start": "earliest", "ending": None}})}
    reader = KinesisStreamReader(options)
    start = reader.initialOffset()
    end = reader.latestOffset(start)
    parts = reader.partitions(start, end)
    assert sorted(p.partition for p in parts) == [0, 1]
    assert all(p.rows is not None and 0 < len(p.rows) <= 15 for p in parts)
    first = {p.partition: list(reader.read(p)) for p in parts}
    restarted = pickle.loads(pickle.dumps(KinesisStreamReader(options)))
    replay = {p.partition: list(restarted.read(p)) for p in restarted.partitions(start, end)}
    assert replay == first
    reader.commit(end)
    following = reader.partitions(end, reader.latestOffset(end))
    seen = {r[5] for rows in [*first.values(), *(list(reader.read(p)) for p in following)]
            for r in rows}
    assert len(seen) == sum(len(v) for v in first.values()) + sum(
        len(p.rows or []) for p in following)  # no record in two batches
