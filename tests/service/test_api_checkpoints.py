"""Checkpoints over real HTTP: commit, read, fencing, elasticity changes, bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from checkpoint.model import BucketKey, TaskCheckpointMeta
from checkpoint.store.sql import SqlCheckpointStore
from grouping.model import SSP
from service.database import make_engine
from tests.service.conftest import StartServer
from tests.service.workers import (
    SimWorker,
    ack_all,
    offsets_for,
    wait_for_members,
    wait_for_version,
)

ARGS = ("--input", "kafka.orders:2", "--debounce-ms", "50", "--lease-ttl-ms", "60000",
        "--barrier-timeout-ms", "60000")


def setup_two_workers(c: httpx.Client) -> tuple[list[SimWorker], dict[str, Any]]:
    workers = [SimWorker(c, "w1", "host-a"), SimWorker(c, "w2", "host-b")]
    for w in workers:
        assert w.register().status_code == 201
    model = wait_for_members(c, ["w1", "w2"])
    assert ack_all(workers, model["version"]) == "done"
    return workers, model


def owner_of(model: dict[str, Any], task: str) -> str:
    return str(next(pid for pid, c in model["containers"].items() if task in c["tasks"]))


def commit(c: httpx.Client, model: dict[str, Any], task: str, offset: int) -> httpx.Response:
    pid = owner_of(model, task)
    t = model["containers"][pid]["tasks"][task]
    return c.post("/checkpoints", headers=SimWorker.lease_of(pid),
                  json={"processorId": pid, "jobModelVersion": model["version"],
                        "checkpoints": {task: offsets_for(t, offset)}})


def read(c: httpx.Client, *tasks: str) -> dict[str, Any]:
    r = c.get("/checkpoints", params={"taskName": list(tasks)})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def scale(c: httpx.Client, workers: list[SimWorker], factor: int, since: int) -> dict[str, Any]:
    r = c.post("/scale", json={"elasticityFactor": factor})
    assert r.status_code == 202, r.text
    model = c.get("/jobmodel").json()
    assert model["version"] == r.json()["jobModelVersion"] > since
    assert ack_all(workers, model["version"]) == "done"
    return dict(model)


def test_scale_1_2_4_2_resolves_checkpoints_by_the_rule(
    start_server: StartServer, store_url: str
) -> None:
    server = start_server(*ARGS, "--store", store_url)
    with server.client() as c:
        workers, m1 = setup_two_workers(c)
        assert commit(c, m1, "Partition 0", 100).json() == {"committed": 1, "advanced": 1,
                                                           "staleTasks": []}

        m2 = scale(c, workers, 2, m1["version"])
        starts = read(c, "Partition 0_0_2", "Partition 0_1_2", "Partition 1_0_2")
        # split children start exactly at the parent's watermark; no history: earliest
        assert starts["Partition 0_0_2"]["inputOffsets"][0]["offset"] == "100"
        assert starts["Partition 0_1_2"]["inputOffsets"][0]["offset"] == "100"
        assert starts["Partition 1_0_2"]["inputOffsets"][0]["offset"] == "earliest"
        commit(c, m2, "Partition 0_0_2", 150)
        commit(c, m2, "Partition 0_1_2", 130)

        m4 = scale(c, workers, 4, m2["version"])
        s4 = read(c, "Partition 0_0_4", "Partition 0_2_4", "Partition 0_1_4", "Partition 0_3_4")
        assert [s4[f"Partition 0_{b}_4"]["inputOffsets"][0]["offset"] for b in range(4)] == [
            "150", "130", "150", "130"]
        commit(c, m4, "Partition 0_0_4", 200)  # bucket 0 runs ahead of bucket 2
        commit(c, m4, "Partition 0_2_4", 160)

        m2b = scale(c, workers, 2, m4["version"])
        merged = read(c, "Partition 0_0_2", "Partition 0_1_2")["Partition 0_0_2"]
        # the merge starts at the slowest child and skips what the faster one did
        assert merged["inputOffsets"][0]["offset"] == "160"
        assert merged["skipBelow"] == [{
            "ssp": {"system": "kafka", "stream": "orders", "partition": 0},
            "elasticityFactor": 4, "keyBucket": 0, "offset": "200"}]
        assert m2b["config"]["elasticityFactor"] == 2
        scale_view = c.get("/scale").json()
        assert scale_view == {"elasticityFactor": 2, "maxElasticityFactor": 64,
                              "liveProcessors": 2, "taskCount": 4, "keyHash": "xxhash64"}


def test_fencing_and_offsets_never_move_backwards(start_server: StartServer) -> None:
    server = start_server(*ARGS)
    with server.client() as c:
        workers, model = setup_two_workers(c)
        owner = owner_of(model, "Partition 0")
        other = "w2" if owner == "w1" else "w1"
        t0 = model["containers"][owner]["tasks"]["Partition 0"]
        body = {"processorId": other, "jobModelVersion": model["version"],
                "checkpoints": {"Partition 0": offsets_for(t0, 10)}}
        fenced = c.post("/checkpoints", json=body, headers=SimWorker.lease_of(other))
        assert fenced.status_code == 409
        assert fenced.json()["error"] == "fenced"
        future = c.post("/checkpoints", headers=SimWorker.lease_of(owner),
                        json={**body, "processorId": owner,
                              "jobModelVersion": model["version"] + 1})
        assert future.status_code == 409
        assert commit(c, model, "Partition 0", 50).json()["advanced"] == 1
        assert commit(c, model, "Partition 0", 20).json() == {"committed": 1, "advanced": 0,
                                                              "staleTasks": []}
        assert read(c, "Partition 0")["Partition 0"]["inputOffsets"][0]["offset"] == "50"
        # a newer version done: commits tagged with the old one are stale where ownership
        # changed (scaling gives new task names, so the old tasks are no longer owned)
        new = scale(c, workers, 2, model["version"])
        stale = commit(c, model, "Partition 0", 60)
        assert stale.status_code == 409
        assert new["version"] > model["version"]
        assert "Fenced" not in stale.text
        metrics = c.get("/metrics").text
        assert "coxswain_fenced_commits_total 3.0" in metrics


def test_v2_checkpoint_id_and_state_markers_round_trip(start_server: StartServer) -> None:
    server = start_server(*ARGS)
    with server.client() as c:
        _, model = setup_two_workers(c)
        pid = owner_of(model, "Partition 1")
        task = model["containers"][pid]["tasks"]["Partition 1"]
        r = c.post("/checkpoints", headers=SimWorker.lease_of(pid), json={
            "processorId": pid, "jobModelVersion": model["version"],
            "checkpoints": {"Partition 1": {
                **offsets_for(task, 7), "checkpointId": "1614147487244-33577",
                "stateCheckpointMarkers": {"blob": {"store1": "id-1"}}}}})
        assert r.status_code == 200, r.text
        got = read(c, "Partition 1")["Partition 1"]
        assert got["version"] == 2
        assert got["checkpointId"] == "1614147487244-33577"
        assert got["stateCheckpointMarkers"] == {"blob": {"store1": "id-1"}}
        by_processor = c.get("/checkpoints", params={"processorId": pid}).json()
        assert "Partition 1" in by_processor
        markers = c.get("/checkpoints/state-markers").json()
        assert markers == {"collector": "w1", "tasks": {"Partition 1": {
            "checkpointId": "1614147487244-33577",
            "stateCheckpointMarkers": {"blob": {"store1": "id-1"}}}}}
        # once the task is gone from the job model, its last checkpoint is still listed
        # (the blob store's collector must keep what it names)
        assert c.post("/scale", json={"elasticityFactor": 2}).status_code == 202
        newer = wait_for_version(c, model["version"])
        assert "Partition 1" not in {t for ct in newer["containers"].values()
                                     for t in ct["tasks"]}
        assert c.get("/checkpoints", params={"taskName": "Partition 1"}).status_code == 404
        assert "Partition 1" in c.get("/checkpoints/state-markers").json()["tasks"]


def test_bad_checkpoint_input_is_refused_and_writes_nothing(start_server: StartServer) -> None:
    server = start_server(*ARGS, "--max-body-bytes", "4096")
    with server.client() as c:
        _, model = setup_two_workers(c)
        pid = owner_of(model, "Partition 0")
        task = model["containers"][pid]["tasks"]["Partition 0"]
        base = {"processorId": pid, "jobModelVersion": model["version"]}

        def post(checkpoints: Any, **extra: Any) -> httpx.Response:
            return c.post("/checkpoints", json={**base, "checkpoints": checkpoints, **extra},
                          headers=SimWorker.lease_of(pid))

        cases = {
            "negative": post({"Partition 0": offsets_for(task, 0) | {"inputOffsets": [
                {"ssp": task["systemStreamPartitions"][0], "offset": "-5"}]}}),
            "not a number": post({"Partition 0": {"inputOffsets": [
                {"ssp": task["systemStreamPartitions"][0], "offset": "abc"}]}}),
            "foreign ssp": post({"Partition 0": {"inputOffsets": [
                {"ssp": {"system": "kafka", "stream": "orders", "partition": 1},
                 "offset": "5"}]}}),
            "numeric offset": post({"Partition 0": {"inputOffsets": [
                {"ssp": task["systemStreamPartitions"][0], "offset": 5}]}}),
            "unknown field": post({"Partition 0": offsets_for(task, 5)}, surprise=True),
            "empty": post({}),
        }
        assert cases["negative"].status_code == 400
        assert cases["negative"].json()["error"] == "invalid_checkpoint"
        assert cases["not a number"].status_code == 400
        assert cases["foreign ssp"].status_code == 400
        for name in ("numeric offset", "unknown field", "empty"):
            assert cases[name].status_code == 422, name
            assert cases[name].json()["error"] == "invalid_request"
        unknown_task = post({"Partition 9": offsets_for(task, 5)})
        assert unknown_task.status_code == 409
        malformed = c.post("/checkpoints", content=b'{"processorId": ',
                           headers={"content-type": "application/json"})
        assert malformed.status_code == 400
        assert malformed.json()["error"] == "malformed_json"
        huge = c.post("/checkpoints", content=b"x" * 5000,
                      headers={"content-type": "application/json"})
        assert huge.status_code == 413
        assert huge.json()["error"] == "payload_too_large"
        assert read(c, "Partition 0")["Partition 0"]["inputOffsets"][0]["offset"] == "earliest"
        missing = c.get("/checkpoints", params={"taskName": "Partition 7"})
        assert missing.status_code == 404
        assert missing.json()["error"] == "unknown_task"


def test_admin_reset_moves_a_partition_back(start_server: StartServer) -> None:
    server = start_server(*ARGS)
    with server.client() as c:
        _, model = setup_two_workers(c)
        commit(c, model, "Partition 0", 500)
        ssp = {"system": "kafka", "stream": "orders", "partition": 0}
        assert c.post("/checkpoints/reset", json={"ssp": ssp, "offset": "20"}).status_code == 200
        assert read(c, "Partition 0")["Partition 0"]["inputOffsets"][0]["offset"] == "20"
        c.post("/checkpoints/reset", json={"ssp": ssp, "offset": "latest"})
        assert read(c, "Partition 0")["Partition 0"]["inputOffsets"][0]["offset"] == "latest"
        bad = c.post("/checkpoints/reset", json={"ssp": {**ssp, "partition": 9}, "offset": "1"})
        assert bad.status_code == 404
        assert bad.json()["error"] == "unknown_partition"
        worse = c.post("/checkpoints/reset", json={"ssp": ssp, "offset": "soon"})
        assert worse.status_code == 400


def commit_state(c: httpx.Client, model: dict[str, Any], task: str, offset: int,
                 checkpoint_id: str) -> None:
    pid = owner_of(model, task)
    t = model["containers"][pid]["tasks"][task]
    r = c.post("/checkpoints", headers=SimWorker.lease_of(pid), json={
        "processorId": pid, "jobModelVersion": model["version"], "checkpoints": {task: {
            **offsets_for(t, offset), "checkpointId": checkpoint_id,
            "stateCheckpointMarkers": {"blob": {"state": f"{task}@{checkpoint_id}"}}}}})
    assert r.status_code == 200, r.text


def sources(c: httpx.Client, task: str) -> list[tuple[str, int, list[int], bool]]:
    return [(s["taskName"], s["elasticityFactor"], s["keyBuckets"], s["nullKeys"])
            for s in read(c, task)[task]["stateSources"]]


def test_stateful_tasks_learn_which_snapshots_their_state_comes_from_across_scaling(
    start_server: StartServer,
) -> None:
    """A split child restores its bucket of the parent's snapshot; a merged task the
    union of its children's; back at factor 1, the task's own older snapshot is stale."""
    server = start_server(*ARGS, "--stateful")
    with server.client() as c:
        workers, m1 = setup_two_workers(c)
        assert sources(c, "Partition 0") == []  # nothing committed: empty state
        commit_state(c, m1, "Partition 0", 100, "1000-1")
        assert sources(c, "Partition 0") == [("Partition 0", 1, [0], True)]

        m2 = scale(c, workers, 2, m1["version"])
        assert sources(c, "Partition 0_0_2") == [("Partition 0", 2, [0], True)]
        assert sources(c, "Partition 0_1_2") == [("Partition 0", 2, [1], False)]
        commit_state(c, m2, "Partition 0_1_2", 130, "2000-1")  # only bucket 1 has state

        scale(c, workers, 1, m2["version"])
        assert sources(c, "Partition 0") == [("Partition 0", 2, [0], True),
                                             ("Partition 0_1_2", 2, [1], False)]
        cp = read(c, "Partition 0")["Partition 0"]
        assert cp["stateSources"][1]["stateCheckpointMarkers"] == {
            "blob": {"state": "Partition 0_1_2@2000-1"}}


def test_a_late_coarse_commit_ahead_of_a_split_child_is_restored_with_its_own_state(
    start_server: StartServer, tmp_path: Path,
) -> None:
    """A paused worker's commit whose fence check passed just before its task split can
    reach the store after a child committed. Its entry is then ahead of the child's, so
    the child's restart starts at its offset. The state must be the late commit's
    snapshot, not the child's (which lacks the records in between)."""
    url = f"sqlite:///{tmp_path}/store.db"
    server = start_server(*ARGS, "--stateful", "--store", url)
    with server.client() as c:
        workers, m1 = setup_two_workers(c)
        commit_state(c, m1, "Partition 0", 100, "1000-1")
        m2 = scale(c, workers, 2, m1["version"])
        commit_state(c, m2, "Partition 0_0_2", 120, "2000-1")
        assert sources(c, "Partition 0_0_2") == [("Partition 0_0_2", 2, [0], True)]

        # the late write, as the service makes it once the fence check has passed
        engine = make_engine(url)
        try:
            SqlCheckpointStore(engine).commit(
                {BucketKey(SSP("kafka", "orders", 0), 1, 0): 150},
                {"Partition 0": TaskCheckpointMeta("1000-2", {"blob": {
                    "state": "Partition 0@1000-2"}})},
                job_model_version=m1["version"], processor_id=owner_of(m1, "Partition 0"))
        finally:
            engine.dispose()

        child = read(c, "Partition 0_0_2")["Partition 0_0_2"]
        assert child["inputOffsets"][0]["offset"] == "150"
        assert sources(c, "Partition 0_0_2") == [("Partition 0", 2, [0], True)]
        assert child["stateSources"][0]["stateCheckpointMarkers"] == {
            "blob": {"state": "Partition 0@1000-2"}}
        # once the child is past it, the child's own snapshot is the state again
        commit_state(c, m2, "Partition 0_0_2", 170, "2000-2")
        child = read(c, "Partition 0_0_2")["Partition 0_0_2"]
        assert child["inputOffsets"][0]["offset"] == "170"
        assert sources(c, "Partition 0_0_2") == [("Partition 0_0_2", 2, [0], True)]


def test_offsets_of_128_digits_round_trip_exactly_and_longer_ones_are_refused(
    start_server: StartServer, store_url: str
) -> None:
    """Kinesis sequence numbers: decimal strings of up to 128 digits, kept exactly from
    the commit through the store to the read, on SQLite and PostgreSQL."""
    server = start_server(*ARGS, "--store", store_url)
    with server.client() as c:
        _, model = setup_two_workers(c)
        seq = int("4968049573474942943589771145554000017257415944797211853" + "7" * 73)
        assert len(str(seq)) == 128
        assert commit(c, model, "Partition 0", seq).status_code == 200
        assert read(c, "Partition 0")["Partition 0"]["inputOffsets"][0]["offset"] == str(seq)
        assert commit(c, model, "Partition 0", seq - 1).json()["advanced"] == 0
        too_long = commit(c, model, "Partition 0", 10**128)
        assert too_long.status_code == 422, too_long.text
        assert read(c, "Partition 0")["Partition 0"]["inputOffsets"][0]["offset"] == str(seq)


def test_a_fenced_processors_unposted_checkpoint_is_recovered_before_the_barrier(
    start_server: StartServer,
) -> None:
    """Exactly-once output: w2 committed a transaction and died before posting its
    checkpoint; the version without w2 lists it as fenced, and a participant posts the
    checkpoint read from the log. Only a listed processor's needs no lease token, and only
    until the version that removed it is done."""
    server = start_server(*ARGS)
    with server.client() as c:
        workers, m1 = setup_two_workers(c)
        task = next(iter(m1["containers"]["w2"]["tasks"]))
        t = m1["containers"]["w2"]["tasks"][task]
        assert commit(c, m1, task, 10).status_code == 200  # posted by w2 itself

        def recover(pid: str, offset: int, **headers: str) -> httpx.Response:
            return c.post("/checkpoints/recovered", headers=headers, json={
                "processorId": pid, "jobModelVersion": m1["version"],
                "checkpoints": {task: offsets_for(t, offset)}})

        assert recover("w2", 20).status_code == 401  # w2 is live: its lease token only
        assert workers[1].leave().status_code == 204
        m2 = wait_for_version(c, m1["version"])
        assert m2["config"]["fencedProcessors"] == ["w2"]
        assert m2["barrier"] == "pending"
        r = recover("w2", 20)  # by w1, after fencing w2 and reading its last record
        assert r.status_code == 200, r.text
        assert recover("w2", 20).json()["advanced"] == 0  # every participant may: once
        assert recover("w1", 30).status_code == 401  # not listed: needs w1's lease token
        assert read(c, task)[task]["inputOffsets"][0]["offset"] == "20"
        assert ack_all(workers[:1], m2["version"]) == "done"
        late = recover("w2", 25)
        assert late.status_code == 409, late.text  # w2 owns nothing in the active version
        assert late.json()["error"] == "fenced"
        assert read(c, task)[task]["inputOffsets"][0]["offset"] == "20"


def test_checkpoints_stay_readable_while_no_processor_runs_the_tasks(
        start_server: StartServer) -> None:
    """Every worker gone (the latest version assigns nothing): an operator still reads a
    task's checkpoints by its name, valid for the job's inputs and factor; a name the
    job does not imply is still unknown."""
    server = start_server(*ARGS, "--elasticity-factor", "2")
    with server.client() as c:
        workers, model = setup_two_workers(c)
        task = "Partition 1_1_2"
        assert commit(c, model, task, 7).status_code == 200
        for w in workers:
            assert c.delete(f"/processors/{w.processor_id}",
                            headers=w.lease).status_code == 204
        while model["containers"]:
            model = wait_for_version(c, model["version"])
        found = c.get("/checkpoints", params={"taskName": task})
        assert found.status_code == 200, found.text
        assert found.json()[task]["inputOffsets"][0]["offset"] == "7"
        unknown = c.get("/checkpoints", params={"taskName": "Partition 9_0_2"})
        assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_task"
