"""Kinesis inputs on a real local Kinesis API (kinesalite): shards become partitions with
their lineage in the job model, a reshard adds the children while the processors keep
their tasks, and ``GET /checkpoints`` tells a child's key bucket which parent key spaces
it still waits for, until each is checkpointed at its end."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from service.local.kinesis import CREDENTIALS, LocalKinesis, client
from tests.service.conftest import StartServer
from tests.service.test_kafka_inputs import eventually
from tests.service.workers import SimWorker, ack_all, offsets_for


def kinesis_client(kinesis: LocalKinesis) -> Any:
    return client(kinesis.endpoint)


def wait_active(client: Any, stream: str) -> None:
    eventually(lambda: client.describe_stream_summary(StreamName=stream)[
        "StreamDescriptionSummary"]["StreamStatus"] == "ACTIVE", 10)


def model_with(c: httpx.Client, partitions: set[int], workers: list[SimWorker]
               ) -> dict[str, Any]:
    """The job model once it has tasks of exactly ``partitions``, every worker in it,
    acknowledged by all of them."""
    def ready() -> dict[str, Any] | None:
        r = c.get("/jobmodel")
        if r.status_code != 200:
            return None
        m = r.json()
        tasks = [t for w in m["containers"].values() for t in w["tasks"].values()]
        seen = {s["partition"] for t in tasks for s in t["systemStreamPartitions"]}
        ok = seen == partitions and set(m["containers"]) == {w.processor_id for w in workers}
        return m if ok else None
    model: dict[str, Any] = eventually(ready)
    assert ack_all(workers, model["version"]) == "done"
    return model


def waiting(c: httpx.Client, *tasks: str) -> dict[str, list[tuple[int, int]]]:
    r = c.get("/checkpoints", params={"taskName": list(tasks)})
    assert r.status_code == 200, r.text
    return {t: [(s["partition"], s["keyBucket"]) for s in v["waitingFor"]]
            for t, v in r.json().items()}


def commit(c: httpx.Client, model: dict[str, Any], task: str, offset: int) -> None:
    pid, container = next((p, w) for p, w in model["containers"].items() if task in w["tasks"])
    r = c.post("/checkpoints", headers=SimWorker.lease_of(pid),
               json={"processorId": pid, "jobModelVersion": model["version"],
                     "checkpoints": {task: offsets_for(container["tasks"][task], offset)}})
    assert r.status_code == 200, r.text


def test_reshards_become_partitions_and_children_wait_for_their_parents_buckets(
        start_server: StartServer, kinesis: LocalKinesis) -> None:
    client = kinesis_client(kinesis)
    stream = f"orders-{uuid.uuid4().hex[:8]}"
    client.create_stream(StreamName=stream, ShardCount=2)
    wait_active(client, stream)
    server = start_server("--input", f"kinesis.{stream}", "--kinesis-endpoint",
                          kinesis.endpoint, "--partition-poll-interval-ms", "200",
                          "--elasticity-factor", "2", "--debounce-ms", "50",
                          env=CREDENTIALS)
    with server.client() as c:
        workers = [SimWorker(c, f"w{i}", f"host-{i}") for i in range(2)]
        for w in workers:
            assert w.register().status_code == 201
        first = model_with(c, {0, 1}, workers)
        shards = first["config"]["shards"][f"kinesis.{stream}"]
        assert sorted(shards) == ["0", "1"]
        assert shards["0"]["parents"] == [] and shards["0"]["endingSequenceNumber"] is None
        assert waiting(c, "Partition 0_0_2", "Partition 1_1_2") == {
            "Partition 0_0_2": [], "Partition 1_1_2": []}
        owners = {t: pid for pid, w in first["containers"].items() for t in w["tasks"]}
        status = c.get("/status").json()["monitoredInputs"]
        assert status == [{"stream": f"kinesis.{stream}", "partitions": 2,
                           "observedPartitions": 2, "state": "ok",
                           "detail": "2 open shards, 0 closed"}]

        # split shard 0: children 2 and 3 join the job model, nobody's tasks move
        low, high = (int(shards["0"]["hashKeyRange"][i]) for i in range(2))
        client.split_shard(StreamName=stream, ShardToSplit="shardId-000000000000",
                           NewStartingHashKey=str((low + high) // 2))
        wait_active(client, stream)
        split = model_with(c, {0, 1, 2, 3}, workers)
        lineage = split["config"]["shards"][f"kinesis.{stream}"]
        assert lineage["2"]["parents"] == [0] and lineage["3"]["parents"] == [0]
        end = int(lineage["0"]["endingSequenceNumber"]) + 1
        assert end > 2**63  # a sequence number beyond int64, exactly
        for task, pid in owners.items():
            assert task in split["containers"][pid]["tasks"]
        # each child bucket waits for the same bucket of its parent
        assert waiting(c, "Partition 2_0_2", "Partition 3_1_2", "Partition 1_0_2") == {
            "Partition 2_0_2": [(0, 0)], "Partition 3_1_2": [(0, 1)], "Partition 1_0_2": []}
        commit(c, split, "Partition 0_0_2", end - 1)  # one short of the end: still waiting
        assert waiting(c, "Partition 2_0_2")["Partition 2_0_2"] == [(0, 0)]
        commit(c, split, "Partition 0_0_2", end)  # bucket 0 of the parent finished
        assert waiting(c, "Partition 2_0_2", "Partition 3_0_2", "Partition 2_1_2") == {
            "Partition 2_0_2": [], "Partition 3_0_2": [], "Partition 2_1_2": [(0, 1)]}

        # merge the two children: shard 4 waits for both parents' buckets
        client.merge_shards(StreamName=stream, ShardToMerge="shardId-000000000002",
                            AdjacentShardToMerge="shardId-000000000003")
        wait_active(client, stream)
        merged = model_with(c, {0, 1, 2, 3, 4}, workers)
        assert merged["config"]["shards"][f"kinesis.{stream}"]["4"]["parents"] == [2, 3]
        assert waiting(c, "Partition 4_1_2")["Partition 4_1_2"] == [(2, 1), (3, 1)]
        ends = {p: int(merged["config"]["shards"][f"kinesis.{stream}"][str(p)][
            "endingSequenceNumber"]) + 1 for p in (2, 3)}
        commit(c, merged, "Partition 2_1_2", ends[2])
        assert waiting(c, "Partition 4_1_2")["Partition 4_1_2"] == [(3, 1)]
        commit(c, merged, "Partition 3_1_2", ends[3])
        assert waiting(c, "Partition 4_1_2")["Partition 4_1_2"] == []


def test_a_missing_stream_is_reported_and_picked_up_once_created(
        start_server: StartServer, kinesis: LocalKinesis) -> None:
    client = kinesis_client(kinesis)
    stream = f"later-{uuid.uuid4().hex[:8]}"
    server = start_server("--input", f"kinesis.{stream}", "--kinesis-endpoint",
                          kinesis.endpoint, "--partition-poll-interval-ms", "200",
                          "--debounce-ms", "50", env=CREDENTIALS)
    with server.client() as c:
        worker = SimWorker(c, "w0", "host-0")
        assert worker.register().status_code == 201
        missing = eventually(lambda: [m for m in c.get("/status").json()["monitoredInputs"]
                                      if m["state"] == "missing"])
        assert "does not exist" in missing[0]["detail"]
        client.create_stream(StreamName=stream, ShardCount=3)
        wait_active(client, stream)
        model = model_with(c, {0, 1, 2}, [worker])
        assert sorted(model["config"]["shards"][f"kinesis.{stream}"]) == ["0", "1", "2"]


def test_a_restart_with_another_stream_forgets_the_old_streams_shards(
        start_server: StartServer, kinesis: LocalKinesis, tmp_path: Any) -> None:
    client = kinesis_client(kinesis)
    old, new = (f"s-{uuid.uuid4().hex[:8]}" for _ in range(2))
    for name, shards in ((old, 2), (new, 3)):
        client.create_stream(StreamName=name, ShardCount=shards)
        wait_active(client, name)
    args = ("--kinesis-endpoint", kinesis.endpoint, "--partition-poll-interval-ms", "200",
            "--debounce-ms", "50")
    first = start_server("--input", f"kinesis.{old}", *args, data_dir=tmp_path / "c",
                         env=CREDENTIALS)
    with first.client() as c:
        w = SimWorker(c, "w0", "host-0")
        assert w.register().status_code == 201
        model_with(c, {0, 1}, [w])
    first.stop()
    second = start_server("--input", f"kinesis.{new}", *args, data_dir=tmp_path / "c",
                          env=CREDENTIALS)
    with second.client() as c:
        w = SimWorker(c, "w0", "host-0")
        assert w.register().status_code in (200, 201)
        model = model_with(c, {0, 1, 2}, [w])
        assert list(model["config"]["shards"]) == [f"kinesis.{new}"]
        streams = {s["stream"] for t in model["containers"]["w0"]["tasks"].values()
                   for s in t["systemStreamPartitions"]}
        assert streams == {new}
