"""Kinesis input end to end: a real local Kinesis API (kinesalite), the coordinator, two
Spark workers as processes. Keyed records with per-key sequence numbers flow while a
shard is split, two adjacent shards are merged, and a shard is split again with a worker
killed (-9) while the parent is being finished. Checked: nothing lost, each key's records
in order across every parent -> child boundary, duplicates only from the killed
worker."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from service.local.kafka import LocalKafka
from service.local.kinesis import CREDENTIALS, LocalKinesis
from tests.service.conftest import StartServer
from tests.service.test_kinesis_inputs import kinesis_client, wait_active
from tests.worker.test_end_to_end import (
    crash,
    first_occurrences,
    new_topics,
    queries_started,
    read_all,
    start_worker,
    stop_workers,
)

# beside: run in a second pytest process beside the rest of the run (tests/infra/beside.py)
pytestmark = [pytest.mark.slow, pytest.mark.beside]
KEYS = 40


class Producing:
    """Keyed records into a Kinesis stream, each key's carrying 0, 1, 2, ..."""

    def __init__(self, client: Any, stream: str) -> None:
        self.client, self.stream = client, stream
        self.seq: dict[str, int] = defaultdict(int)
        self.total = 0

    def send(self, n: int) -> None:
        batch = []
        for i in range(n):
            key = f"key-{(self.total + i) * 7919 % KEYS}"
            batch.append({"PartitionKey": key, "Data": str(self.seq[key]).encode()})
            self.seq[key] += 1
        for start in range(0, n, 100):  # one key's records in order: one call at a time
            out = self.client.put_records(StreamName=self.stream,
                                          Records=batch[start:start + 100])
            assert out.get("FailedRecordCount", 0) == 0, out
        self.total += n


def distinct(kafka: LocalKafka, output: str) -> int:
    return len({(r["key"], r["seq"]) for r in read_all(kafka, output)})


def wait_all(kafka: LocalKafka, output: str, expected: int, workers: dict[str, Any],
             tmp: Path, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while distinct(kafka, output) < expected:
        for name, w in workers.items():
            assert w.poll() is None, (tmp / f"{name}.log").read_text()[-4000:]
        assert time.monotonic() < deadline, (
            f"{distinct(kafka, output)} of {expected} processed\n"
            + (tmp / "w0.log").read_text()[-3000:])
        time.sleep(0.5)


def shard_ids(client: Any, stream: str, open_only: bool = True) -> list[str]:
    return sorted(s["ShardId"] for s in client.list_shards(StreamName=stream)["Shards"]
                  if not open_only or "EndingSequenceNumber" not in s["SequenceNumberRange"])


def split(client: Any, stream: str, shard: str) -> None:
    item = next(s for s in client.list_shards(StreamName=stream)["Shards"]
                if s["ShardId"] == shard)
    low, high = (int(item["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
    client.split_shard(StreamName=stream, ShardToSplit=shard,
                       NewStartingHashKey=str((low + high) // 2))
    wait_active(client, stream)


def test_split_merge_split_with_a_kill_keeps_every_keys_order(
    start_server: StartServer, kafka: LocalKafka, kinesis: LocalKinesis, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)  # the workers' Spark source and the coordinator's lister
    client = kinesis_client(kinesis)
    stream = f"orders-{uuid.uuid4().hex[:8]}"
    client.create_stream(StreamName=stream, ShardCount=2)
    wait_active(client, stream)
    _, output = new_topics(kafka, 1)
    producing = Producing(client, stream)
    producing.send(200)
    server = start_server("--input", f"kinesis.{stream}", "--kinesis-endpoint",
                          kinesis.endpoint, "--partition-poll-interval-ms", "500",
                          "--elasticity-factor", "2", "--debounce-ms", "300")

    def worker(pid: str) -> Any:
        return start_worker(tmp_path, server.url, kafka, output, pid, "--api", "task",
                            "--output-topic", output, "--kinesis-endpoint", kinesis.endpoint,
                            app="tests.worker.apps:kinesis_echo_task")

    workers = {f"w{i}": worker(f"w{i}") for i in range(2)}
    try:
        wait_all(kafka, output, producing.total, workers, tmp_path)
        split(client, stream, "shardId-000000000000")  # -> 2 and 3
        producing.send(200)
        wait_all(kafka, output, producing.total, workers, tmp_path)
        client.merge_shards(StreamName=stream, ShardToMerge="shardId-000000000002",
                            AdjacentShardToMerge="shardId-000000000003")  # -> 4
        wait_active(client, stream)
        producing.send(200)
        wait_all(kafka, output, producing.total, workers, tmp_path)
        before_kill = len(read_all(kafka, output))
        producing.send(300)  # shard 1 has records in flight when it is split...
        split(client, stream, "shardId-000000000001")  # -> 5 and 6
        producing.send(100)
        time.sleep(2)
        crash(workers["w1"])  # ... and a worker dies while parents are being finished
        workers["w1"] = worker("w1")
        producing.send(200)
        wait_all(kafka, output, producing.total, workers, tmp_path)
    finally:
        stop_workers(list(workers.values()))
    assert shard_ids(client, stream) == ["shardId-000000000004", "shardId-000000000005",
                                         "shardId-000000000006"]
    records = read_all(kafka, output)
    per_key, duplicated = first_occurrences(records)
    assert {k: sorted(r["seq"] for r in v) for k, v in per_key.items()} == {
        k: list(range(n)) for k, n in producing.seq.items()}  # nothing lost
    for key, rs in per_key.items():  # in order across every parent -> child boundary
        seqs = [r["seq"] for r in rs]
        assert seqs == sorted(seqs), (key, [(r["seq"], r["shard"]) for r in rs][:30])
    # every shard's records were processed, children included
    assert {r["shard"] for r in records} == {0, 1, 2, 3, 4, 5, 6}
    assert all(d["processor"] == "w1" for d in duplicated), duplicated[:5]
    assert all(d["at"] >= before_kill for d in duplicated), duplicated[:5]
    # one query per worker process across the splits and the merge
    # (the restarted w1 starts one once it gets a task, if it does before the end)
    assert queries_started(tmp_path, "w0") == [1]
    w1 = queries_started(tmp_path, "w1")
    assert w1[0] == 1 and all(n <= 1 for n in w1), w1
