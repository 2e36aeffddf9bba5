"""Data safety of commits and publications (regressions of defects seen against a running
``coxswain serve``): checkpoint v2 metadata never goes backwards, a commit tagged with a
version from before the task moved away is fenced, and a crash between the steps of a
publication never stalls the job."""

from __future__ import annotations

import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import httpx

from coordinator.job_models import MODELS, JobModelRepository
from coordinator.store.sql import SqlMetadataStore
from grouping.model import JobModel
from grouping.serde import job_model_to_bytes
from service.database import make_engine, upgrade
from service.local.ports import free_port
from tests.infra.postgres import PostgresServer
from tests.service.conftest import StartServer
from tests.service.workers import SimWorker, ack_all, joined, offsets_for, settle, wait_for_version

ARGS = ("--input", "kafka.orders:1", "--debounce-ms", "50", "--lease-ttl-ms", "60000",
        "--barrier-timeout-ms", "60000")


def _v2(task: dict[str, Any], offset: int, checkpoint_id: str) -> dict[str, Any]:
    return {**offsets_for(task, offset), "checkpointId": checkpoint_id,
            "stateCheckpointMarkers": {"blob": {"counts": f"index-{checkpoint_id}"}}}


def test_a_late_commit_never_pairs_an_older_snapshot_with_newer_offsets(
    start_server: StartServer, store_url: str,
) -> None:
    server = start_server(*ARGS, "--store", store_url)
    with server.client() as c:
        w1, model = joined(c, "w1", "host-a")
        task = w1.tasks(model)["Partition 0"]
        newer = w1.commit(model["version"], {"Partition 0": _v2(task, 3000, "2000-2")})
        assert newer.status_code == 200 and newer.json()["advanced"] == 1
        late = w1.commit(model["version"], {"Partition 0": _v2(task, 2500, "1000-1")})
        assert late.status_code == 200, late.text
        assert late.json() == {"committed": 1, "advanced": 0, "staleTasks": ["Partition 0"]}
        stored = c.get("/checkpoints", params={"taskName": "Partition 0"}).json()
        cp = stored["Partition 0"]
        assert cp["inputOffsets"][0]["offset"] == "3000"
        assert cp["checkpointId"] == "2000-2"
        assert cp["stateCheckpointMarkers"] == {"blob": {"counts": "index-2000-2"}}
        # a retry of the newest commit, and the next one, still write
        again = w1.commit(model["version"], {"Partition 0": _v2(task, 3000, "2000-2")})
        assert again.json()["staleTasks"] == []
        w1.commit(model["version"], {"Partition 0": _v2(task, 3500, "3000-3")})
        cp = c.get("/checkpoints", params={"taskName": "Partition 0"}).json()["Partition 0"]
        assert (cp["inputOffsets"][0]["offset"], cp["checkpointId"]) == ("3500", "3000-3")
        # markers without offsets cannot be ordered: refused, nothing written
        bare = w1.commit(model["version"], {"Partition 0": {
            "inputOffsets": [], "checkpointId": "9000-9"}})
        assert bare.status_code == 422, bare.text
        cp = c.get("/checkpoints", params={"taskName": "Partition 0"}).json()["Partition 0"]
        assert cp["checkpointId"] == "3000-3"


def _wait_owner(c: httpx.Client, since: int, owner: str,
                workers: list[SimWorker]) -> dict[str, Any]:
    """The next versions until ``owner`` holds Partition 0 with the barrier done."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        model = settle(c, workers, since)
        since = model["version"]
        if "Partition 0" in model["containers"].get(owner, {}).get("tasks", {}):
            return model
    raise AssertionError(f"{owner} never got Partition 0")


def test_a_commit_tagged_before_the_task_went_elsewhere_and_came_back_is_fenced(
    start_server: StartServer,
) -> None:
    server = start_server(*ARGS)
    with server.client() as c:
        w1, w2 = SimWorker(c, "w1", "host-a"), SimWorker(c, "w2", "host-b")
        w1.register()
        first = _wait_owner(c, 0, "w1", [w1])
        task = w1.tasks(first)["Partition 0"]
        assert w1.commit(first["version"], {"Partition 0": offsets_for(task, 10)}).is_success
        # w1 leaves: the task goes to w2, which works on it and commits
        w2.register()
        assert w1.leave().status_code == 204
        second = _wait_owner(c, first["version"], "w2", [w2])
        assert w2.commit(second["version"], {"Partition 0": offsets_for(task, 50)}).is_success
        # w1 comes back and w2 leaves: the task is w1's again
        w1.register()
        assert w2.leave().status_code == 204
        third = _wait_owner(c, second["version"], "w1", [w1])
        # a late commit of w1's first ownership (version 1) is stale, whatever its offset
        stale = w1.commit(first["version"], {"Partition 0": offsets_for(task, 70)})
        assert stale.status_code == 409, stale.text
        assert stale.json()["error"] == "fenced"
        assert f"did not own task 'Partition 0' in version {second['version']}" in stale.text
        # tagged with the current ownership it is accepted
        assert w1.commit(third["version"], {"Partition 0": offsets_for(task, 70)}).is_success


def test_a_version_that_never_ran_does_not_fence_a_worker_that_kept_its_query(
    start_server: StartServer,
) -> None:
    """w1's query of version 1 outlives version 2, in which a task went to w2 but whose
    barrier never completed (superseded by version 3, which gives it back): nobody worked
    on the task under version 2, so w1's commits tagged 1 stand."""
    server = start_server("--input", "kafka.orders:2", "--debounce-ms", "50",
                          "--lease-ttl-ms", "60000", "--barrier-timeout-ms", "60000")
    with server.client() as c:
        w1, w2 = SimWorker(c, "w1", "host-a"), SimWorker(c, "w2", "host-b")
        w1.register()
        first = _wait_owner(c, 0, "w1", [w1])
        tasks = w1.tasks(first)
        assert sorted(tasks) == ["Partition 0", "Partition 1"]
        w2.register()
        second = wait_for_version(c, first["version"])
        assert w2.tasks(second), second  # a task moved to w2 ...
        assert w1.ack(second["version"]).status_code == 200  # ... w2 never acks
        assert w2.leave().status_code == 204
        third = wait_for_version(c, second["version"])
        assert sorted(w1.tasks(third)) == ["Partition 0", "Partition 1"]
        assert ack_all([w1], third["version"]) == "done"
        moved = next(iter(w2.tasks(second)))
        late = w1.commit(first["version"], {moved: offsets_for(tasks[moved], 40)})
        assert late.status_code == 200, late.text


def _metadata_store(data_dir: Path) -> SqlMetadataStore:
    engine = make_engine(f"sqlite:///{data_dir / 'coxswain.db'}")
    upgrade(engine)
    return SqlMetadataStore(engine)


def test_a_model_stored_without_its_pointer_moving_does_not_block_later_versions(
    start_server: StartServer, tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    server = start_server(*ARGS, data_dir=data)
    with server.client() as c:
        _, model = joined(c, "w1", "host-a")
    server.stop()
    # what a crash between storing version 2's body and moving the pointer leaves behind
    store = _metadata_store(data)
    assert store.compare_and_set(MODELS, f"{model['version'] + 1:020d}",
                                 zlib.compress(b'{"not": "a job model"}'), None) is not None
    restarted = start_server(*ARGS, data_dir=data)
    with restarted.client() as c:
        w1 = SimWorker(c, "w1", "host-a")
        w1.heartbeat()
        scaled = c.post("/scale", json={"elasticityFactor": 2})
        assert scaled.status_code == 202, scaled.text
        new = c.get("/jobmodel").json()
        assert new["version"] == model["version"] + 1
        assert sorted(new["containers"]["w1"]["tasks"]) == ["Partition 0_0_2",
                                                              "Partition 0_1_2"]
        w2 = SimWorker(c, "w2", "host-b")
        w2.register()
        after = wait_for_version(c, new["version"])
        assert SimWorker(c, "w2", "host-b").tasks(after)


def test_a_version_published_without_its_barrier_record_recovers_on_start(
    start_server: StartServer, tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    server = start_server(*ARGS, data_dir=data)
    with server.client() as c:
        w1 = SimWorker(c, "w1", "host-a")
        w1.register()
        model = wait_for_version(c, 0)  # pending: w1 has not acked
    server.stop()
    # what a crash between moving the pointer and writing the barrier left behind (the
    # order of steps before this fix)
    store = _metadata_store(data)
    assert store.delete("barriers", f"{model['version']:020d}")
    restarted = start_server(*ARGS, data_dir=data)
    with restarted.client() as c:
        w1 = SimWorker(c, "w1", "host-a")
        deadline = time.monotonic() + 10
        acked = w1.ack(model["version"])
        while acked.status_code == 404 and time.monotonic() < deadline:
            time.sleep(0.1)  # the new leader recovers it as it takes the lead
            acked = w1.ack(model["version"])
        assert acked.status_code == 200, acked.text
        assert acked.json()["barrier"] == "done"
        status = c.get("/status").json()
        assert status["activeVersion"] == model["version"]


def test_an_orphan_body_is_never_taken_for_a_published_version(tmp_path: Path) -> None:
    """The body of a published version is never overwritten by a later publish attempt
    of the same version number (the pointer already passed it)."""
    store = _metadata_store(tmp_path)
    repo = JobModelRepository(store)
    first = JobModel.of(1, {"elasticityFactor": 1}, [])
    assert repo.publish(first, None)
    pointer = repo.latest()
    assert pointer is not None
    impostor = JobModel.of(1, {"elasticityFactor": 2}, [])
    assert not repo.publish(impostor, None)
    assert not repo.publish(impostor, pointer[1])
    loaded = repo.load(1)
    assert loaded is not None and dict(loaded.config) == {"elasticityFactor": 1}
    assert job_model_to_bytes(loaded) == job_model_to_bytes(first)


def test_a_second_embedded_coordinator_on_one_store_refuses_to_start(
    start_server: StartServer, tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    first = start_server(*ARGS, data_dir=data)
    second = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(free_port()),
         "--data-dir", str(data), *ARGS], capture_output=True, text=True, timeout=60,
        check=False)
    assert second.returncode != 0
    assert first.proc is not None
    assert f"another coordinator (pid {first.proc.pid}) serves the store" in second.stderr
    with first.client() as c:
        assert c.get("/readyz").status_code == 200  # the first one is untouched
    # the lock dies with its holder, even by kill -9: a restart is never blocked
    first.kill()
    again = start_server(*ARGS, data_dir=data)
    with again.client() as c:
        assert c.get("/readyz").status_code == 200


def test_two_coordinators_on_one_postgresql_store_never_both_lead(
    start_server: StartServer, postgres: PostgresServer, tmp_path: Path,
) -> None:
    store = postgres.create_database()
    lease = ("--store", store, "--leader-lease-ms", "1500")
    first = start_server(*ARGS, *lease, "--replica-id", "coord-a", data_dir=tmp_path / "a")
    second = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(free_port()),
         "--data-dir", str(tmp_path / "b"), *ARGS, *lease, "--replica-id", "coord-b"],
        capture_output=True, text=True, timeout=60, check=False)
    assert second.returncode != 0
    assert "coordinator 'coord-a' leads this store" in second.stderr, second.stderr
    with first.client() as c:
        assert c.get("/readyz").json()["leader"] == "coord-a"
    # a crashed leader's lease runs out and a new coordinator takes over (epoch 2)
    first.kill()
    third = start_server(*ARGS, *lease, "--replica-id", "coord-c", data_dir=tmp_path / "c")
    with third.client() as c:
        assert c.get("/readyz").json()["leader"] == "coord-c"
        _, model = joined(c, "w1", "host-a")  # its ack completes the barrier
        assert c.get("/status").json()["activeVersion"] == model["version"]
    # a graceful stop gives the lease up: the next one starts at once
    third.stop()
    fourth = start_server(*ARGS, *lease, "--replica-id", "coord-d", data_dir=tmp_path / "d")
    with fourth.client() as c:
        assert c.get("/readyz").json()["leader"] == "coord-d"
