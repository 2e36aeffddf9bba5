"""The Kinesis source's shard reading, on a real local Kinesis API (kinesalite): records in
order from each kind of start, per-shard limits, the end marker of a split parent, and an
exact replay of a batch."""

from __future__ import annotations

import pickle
import uuid
from pathlib import Path
from typing import Any

import pytest

from service.local.kinesis import CREDENTIALS, LocalKinesis
from tests.service.test_kinesis_inputs import kinesis_client, wait_active
from worker.sources.kinesis import EARLIEST, KinesisStreamReader, ShardReader, offset_key
from worker.sources.source_plan import PartitionStart, SourcePlan, write_plan


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
        kinesis: LocalKinesis, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``KinesisStreamReader`` as Spark drives it (no Spark needed): the latest offset
    reads ahead and each shard's records go to its own input partition; after a restart
    (a fresh reader, nothing kept) the same batch is read again from Kinesis, row for row;
    the reader pickles (Spark ships it to its tasks)."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    client = kinesis_client(kinesis)
    stream = _stream(client, 2)
    _put(client, stream, 40)
    plan = tmp_path / "plan.json"
    write_plan(plan, SourcePlan(1, {"0": PartitionStart("earliest"),
                                    "1": PartitionStart("earliest")}))
    options = {"stream": stream, "endpoint": kinesis.endpoint, "region": "us-east-1",
               "maxRecordsPerShard": "15", "plan": str(plan)}
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


def test_the_reader_follows_its_plan_shards_join_leave_and_are_read_again(
        kinesis: LocalKinesis, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The source plan changes between triggers: a shard joins (from its start), one
    leaves, a generation bump reads a shard again from an earlier start; rows carry their
    shard's generation; nothing new and no change: the same offsets (no batch)."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    client = kinesis_client(kinesis)
    stream = _stream(client, 2)
    seqs = _put(client, stream, 30)
    plan = tmp_path / "plan.json"
    write_plan(plan, SourcePlan(1, {"0": PartitionStart("earliest")}))
    reader = KinesisStreamReader({"stream": stream, "endpoint": kinesis.endpoint,
                                  "region": "us-east-1", "maxRecordsPerShard": "1000",
                                  "plan": str(plan)})
    start = reader.initialOffset()
    end = reader.latestOffset(start)
    assert set(end["p"]) == {"0"}
    rows0 = [r for p in reader.partitions(start, end) for r in reader.read(p)]
    assert rows0 and all(r[-1] == 0 for r in rows0)  # generation 0
    reader.commit(end)
    assert reader.latestOffset(end) is end  # nothing new, nothing changed
    write_plan(plan, SourcePlan(2, {"1": PartitionStart("earliest", generation=3)}))
    after = reader.latestOffset(end)
    assert set(after["p"]) == {"1"} and after["p"]["1"]["g"] == 3
    rows1 = [r for p in reader.partitions(end, after) for r in reader.read(p)]
    assert {r[3] for r in rows1} == {1} and all(r[-1] == 3 for r in rows1)
    assert len(rows0) + len(rows1) == len(seqs)
    reader.commit(after)
    # shard 1 again from its third record (after its second), at a new generation
    second = sorted(int(r[5]) for r in rows1)[1]
    write_plan(plan, SourcePlan(3, {"1": PartitionStart(str(second + 1), generation=4)}))
    again = reader.latestOffset(after)
    rows = [r for p in reader.partitions(after, again) for r in reader.read(p)]
    assert len(rows) == len(rows1) - 2 and all(r[-1] == 4 for r in rows)


def test_a_joining_shards_read_ahead_survives_the_last_batchs_commit(
        kinesis: LocalKinesis, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Spark commits a batch after it asked for the next one's end: the records read
    ahead for a shard that joined the plan meanwhile are still planned (a replay of a
    closed shard's end could give no end marker, and a parent would never finish)."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    client = kinesis_client(kinesis)
    stream = _stream(client, 2)
    _put(client, stream, 20)
    plan = tmp_path / "plan.json"
    write_plan(plan, SourcePlan(1, {"0": PartitionStart("earliest")}))
    reader = KinesisStreamReader({"stream": stream, "endpoint": kinesis.endpoint,
                                  "region": "us-east-1", "maxRecordsPerShard": "1000",
                                  "plan": str(plan)})
    first = reader.latestOffset(reader.initialOffset())
    write_plan(plan, SourcePlan(2, {"0": PartitionStart("earliest"),
                                    "1": PartitionStart("earliest", generation=2)}))
    second = reader.latestOffset(first)
    reader.commit(first)  # (after the next end was asked for)
    ranges = [p for p in reader.partitions(first, second) if p.partition == 1]
    assert ranges and ranges[0].rows, ranges  # planned from what was read, not a replay


def test_a_replay_of_a_batch_that_ended_a_shard_gives_its_end_marker(
        kinesis: LocalKinesis) -> None:
    client = kinesis_client(kinesis)
    stream = _stream(client, 1)
    seqs = _put(client, stream, 10)
    reader = ShardReader(client, stream, {0: None})
    after = reader.read(0, EARLIEST, 100).next_offset
    client.split_shard(StreamName=stream, ShardToSplit="shardId-000000000000",
                       NewStartingHashKey=str(2**127))
    wait_active(client, stream)
    end = reader.read(0, after, 100)
    assert end.ended and end.rows[-1][-1] is True  # the marker
    replay = ShardReader(client, stream, {0: None}).read(0, after, 2**31,
                                                          until=int(end.next_offset))
    assert replay.ended and [r[-1] for r in replay.rows] == [True], replay.rows
    assert int(seqs[-1]) < int(end.next_offset)
