"""Stateful Kinesis end to end: state follows every key across reshards. Real
kinesalite, the coordinator, Kafka for the output, moto's S3 API server as the blob
store, two Spark workers as processes, one standby per task, factor 2. A counting app
keeps a counter per key in ``ctx.state``: while records flow, a shard is split, the
children merged, a shard split with a factor change right after, and a shard split
with a worker killed (-9) while its parents are being finished and restarted on its
location; and before those, the other worker's Spark Python workers killed mid-batch (its
query started again in the same process). Every output record, duplicates included, has
count == seq + 1: a key that moved to a child shard continues its count from its parents'
final state."""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from service.local.kafka import LocalKafka
from service.local.kinesis import CREDENTIALS, LocalKinesis
from service.local.s3 import LocalS3
from tests.service.conftest import StartServer
from tests.service.test_kinesis_inputs import kinesis_client, wait_active
from tests.worker.test_end_to_end import (
    crash,
    new_topics,
    queries_started,
    read_all,
    start_worker,
    stop_workers,
)
from tests.worker.test_kinesis_end_to_end import Producing, shard_ids, split, wait_all
from tests.worker.test_query_restart import kill_until_restarted
from tests.worker.test_stateful_end_to_end import restores_of

# beside: run in a second pytest process beside the rest of the run (tests/infra/beside.py)
pytestmark = [pytest.mark.slow, pytest.mark.beside]


def check_counts(records: list[dict[str, Any]], producing: Producing) -> None:
    """count == seq + 1 on every output record; nothing lost; per-key order."""
    wrong = [r for r in records if r["count"] != r["seq"] + 1]
    assert not wrong, wrong[:5]
    per_key: dict[str, list[int]] = defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for r in records:
        if (r["key"], r["seq"]) not in seen:
            seen.add((r["key"], r["seq"]))
            per_key[r["key"]].append(r["seq"])
    assert {k: sorted(v) for k, v in per_key.items()} == {
        k: list(range(n)) for k, n in producing.seq.items()}  # nothing lost
    for key, seqs in per_key.items():
        assert seqs == sorted(seqs), (key, seqs[:20])


def test_counts_follow_every_key_across_splits_merges_a_factor_change_and_a_kill(
    start_server: StartServer, kafka: LocalKafka, kinesis: LocalKinesis, s3_server: LocalS3,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    client = kinesis_client(kinesis)
    stream = f"counts-{uuid.uuid4().hex[:8]}"
    client.create_stream(StreamName=stream, ShardCount=2)
    wait_active(client, stream)
    _, output = new_topics(kafka, 1)
    bucket = f"kinesis-state-{uuid.uuid4().hex[:8]}"
    s3_server.create_bucket(bucket)
    producing = Producing(client, stream)
    producing.send(200)
    # --poll-close-grace-ms 0 and a lease longer than any restart: a worker restarted at
    # once keeps its tasks (and finds their state on its disk). The lease was 40 s, and
    # on a loaded machine the restarted w1's Spark start took 41 s: its lease expired,
    # its tasks moved, and it came back to others (the test_stateful_end_to_end fix)
    server = start_server("--input", f"kinesis.{stream}", "--kinesis-endpoint",
                          kinesis.endpoint, "--partition-poll-interval-ms", "500",
                          "--elasticity-factor", "2", "--debounce-ms", "300", "--stateful",
                          "--num-standbys", "1", "--poll-close-grace-ms", "0",
                          "--lease-ttl-ms", "600000")

    def worker(pid: str) -> Any:
        return start_worker(tmp_path, server.url, kafka, output, pid, "--api", "task",
                            "--output-topic", output, "--kinesis-endpoint", kinesis.endpoint,
                            "--stateful", "--state-dir", str(tmp_path / f"state-{pid}"),
                            "--blob-store", f"s3://{bucket}/job", "--blob-store-endpoint",
                            s3_server.endpoint, "--blob-gc-interval-s", "2",
                            "--blob-gc-grace-s", "5",  # collected all along: the parents'
                            app="tests.worker.apps:kinesis_count_task")  # final snapshots stay

    workers = {f"w{i}": worker(f"w{i}") for i in range(2)}
    try:
        wait_all(kafka, output, producing.total, workers, tmp_path)
        with server.client() as c:  # the backlog per task, for the autosizer
            deadline = time.monotonic() + 60
            while not any((p.get("stats") or {}).get("consumerLagMs")
                          for p in c.get("/status").json()["processors"]):
                assert time.monotonic() < deadline, json.dumps(
                    [p.get("stats") for p in c.get("/status").json()["processors"]])
                time.sleep(0.5)
            stats = [p.get("stats") or {} for p in c.get("/status").json()["processors"]]
            assert all(isinstance(v, int) and v >= 0 for s in stats
                       for v in (s.get("consumerLag") or {}).values()), stats
        split(client, stream, "shardId-000000000000")  # -> 2 and 3
        producing.send(200)
        wait_all(kafka, output, producing.total, workers, tmp_path)
        client.merge_shards(StreamName=stream, ShardToMerge="shardId-000000000002",
                            AdjacentShardToMerge="shardId-000000000003")  # -> 4
        wait_active(client, stream)
        producing.send(200)
        wait_all(kafka, output, producing.total, workers, tmp_path)
        # an infrastructure fault under w0 (its Spark Python workers killed mid-batch):
        # its query starts again in the same process, its lease and tasks kept
        before_restart = len(read_all(kafka, output))
        kill_until_restarted(workers["w0"], tmp_path / "w0.log", producing)
        split(client, stream, "shardId-000000000001")  # -> 5 and 6, and at once:
        with server.client() as c:
            assert c.post("/scale", json={"elasticityFactor": 4}).status_code == 202
        producing.send(200)
        wait_all(kafka, output, producing.total, workers, tmp_path)
        before_kill = len(read_all(kafka, output))
        producing.send(300)  # shard 4 has records in flight when it is split...
        split(client, stream, "shardId-000000000004")  # -> 7 and 8
        producing.send(100)
        time.sleep(2)
        crash(workers["w1"])  # ... and a worker dies while parents are being finished,
        workers["w1"] = worker("w1")  # and comes back on its location
        producing.send(200)
        wait_all(kafka, output, producing.total, workers, tmp_path)
        with server.client() as c:  # the restarted worker's restores, once it reports
            restores = restores_of(c, "w1")
    finally:
        stop_workers(list(workers.values()))
    assert shard_ids(client, stream) == ["shardId-000000000005", "shardId-000000000006",
                                         "shardId-000000000007", "shardId-000000000008"]
    records = read_all(kafka, output)
    check_counts(records, producing)
    # state followed keys into child shards: a key's first record in a child shard
    # counted on from its parents' records (count > 1), for many keys
    first_in_child: dict[tuple[str, int], dict[str, Any]] = {}
    for r in records:
        if r["shard"] >= 2:
            first_in_child.setdefault((r["key"], r["shard"]), r)
    carried = [r for r in first_in_child.values() if r["count"] > 1]
    assert len(carried) >= len(first_in_child) // 2, list(first_in_child.values())[:5]
    assert {r["shard"] for r in records} == set(range(9))
    # duplicates only past the faults: w0's restarted query redid its batch in flight
    # from its checkpoints, the killed worker's tasks redid what followed its last commit
    seen: set[tuple[str, int]] = set()
    for i, r in enumerate(records):
        if (r["key"], r["seq"]) in seen:
            assert i >= before_restart, r
            assert i >= before_kill or r["processor"] == "w0", r
        seen.add((r["key"], r["seq"]))
    # the restarted worker (same location, its lease still held) got its tasks back and
    # found their state on its own disk
    assert any(r["source"] == "local" and r["bytes"] == 0
               for r in restores.values()), restores
    # one query per worker process across the reshards and the factor change, and more
    # in w0 for its fault (one per death: the kills go on until its log says so, and
    # may reach the next query's workers too), in one process (the restarted w1 starts
    # one once it gets a task, if it does before the end); w0 registered once: the
    # restarts kept its lease
    w0 = queries_started(tmp_path, "w0")
    assert len(w0) == 1 and w0[0] >= 2, w0
    assert (tmp_path / "w0.log").read_text().count("registered as w0") == 1
    w1 = queries_started(tmp_path, "w1")
    assert w1[0] == 1 and all(n <= 1 for n in w1), w1
