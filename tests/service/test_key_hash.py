"""A job's key hash on the REST API and across restarts and upgrades: a new job gets
xxhash64; a store made by the release before ``keyHash`` existed keeps crc32 (its models
carry none); a change is refused at start while key-bucket checkpoints depend on the
job's function, and allowed while none do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.releases import BEFORE_KEY_HASH, release_source
from tests.service.conftest import StartServer
from tests.service.server import Server
from tests.service.workers import SimWorker, ack_all, offsets_for, settle, wait_for_version

ARGS = ("--input", "kafka.orders:2", "--debounce-ms", "50", "--lease-ttl-ms", "60000")


def _scaled_to_2_with_checkpoints(c: httpx.Client) -> dict[str, Any]:
    """One worker, factor 2, every task checkpointed at offset 5: the job's history
    depends on its key hash."""
    w = SimWorker(c, "w1", "host-a")
    assert w.register().status_code in (200, 201)
    model = settle(c, [w])
    assert c.post("/scale", json={"elasticityFactor": 2}).status_code == 202
    while model["config"]["elasticityFactor"] != 2:
        model = wait_for_version(c, model["version"])
    ack_all([w], model["version"])
    tasks = w.tasks(model)
    assert len(tasks) == 4
    answer = w.commit(model["version"], {n: offsets_for(t, 5) for n, t in tasks.items()})
    assert answer.status_code == 200, answer.text
    return model


def _refused(tmp_path: Path, *args: str) -> str:
    """A serve on ``tmp_path`` that must exit at start; its output."""
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--port", "0", "--data-dir",
         str(tmp_path), *ARGS, *args], capture_output=True, text=True, timeout=60,
        check=False)
    assert done.returncode != 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_a_new_job_uses_xxhash64_and_a_change_is_refused_once_buckets_have_history(
        start_server: StartServer, tmp_path: Path) -> None:
    server = start_server(*ARGS, data_dir=tmp_path)
    with server.client() as c:
        assert c.get("/scale").json()["keyHash"] == "xxhash64"
        status = c.get("/status").json()
        assert status["keyHash"] == "xxhash64"
        assert status["keyBuckets"]["emptyBuckets"] == []
        model = _scaled_to_2_with_checkpoints(c)
        assert model["config"]["keyHash"] == "xxhash64"
    server.stop()
    out = _refused(tmp_path, "--key-hash", "crc32")
    assert "this job's key hash is xxhash64 and 4 key-bucket checkpoint entries" in out
    assert "start a new job" in out
    again = start_server(*ARGS, data_dir=tmp_path)  # the job's own, unchanged
    with again.client() as c:
        assert c.get("/scale").json()["keyHash"] == "xxhash64"
        # the job and its checkpoints are as they were
        cps = c.get("/checkpoints", params={"taskName": "Partition 0_1_2"}).json()
        assert cps["Partition 0_1_2"]["inputOffsets"][0]["offset"] == "5"


def test_a_job_without_bucket_history_may_change_its_key_hash(
        start_server: StartServer, tmp_path: Path) -> None:
    server = start_server(*ARGS, data_dir=tmp_path)
    with server.client() as c:
        w = SimWorker(c, "w1", "host-a")
        assert w.register().status_code in (200, 201)
        model = settle(c, [w])  # factor 1: offsets that hold whatever the hash
        tasks = w.tasks(model)
        assert w.commit(model["version"], {n: offsets_for(t, 3) for n, t in
                                           tasks.items()}).status_code == 200
    server.stop()
    changed = start_server(*ARGS, "--key-hash", "crc32", data_dir=tmp_path)
    with changed.client() as c:
        assert c.get("/scale").json()["keyHash"] == "crc32"
        w = SimWorker(c, "w1", "host-a")
        assert w.register().status_code in (200, 201)
        model = wait_for_version(c, 0)
        while model["config"].get("keyHash") != "crc32":  # regenerated with the new one
            model = wait_for_version(c, model["version"])


@pytest.fixture
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The source of the release before ``keyHash``, from this clone's history."""
    return release_source(BEFORE_KEY_HASH, tmp_path_factory.mktemp("previous-release"))


def test_a_store_of_the_previous_release_keeps_crc32(previous_release: Path,
                                                     tmp_path: Path) -> None:
    data = tmp_path / "data"
    old = Server(data, list(ARGS), launcher=["env", "-C", str(previous_release)])
    old.start()
    try:
        with old.client() as c:
            assert "keyHash" not in c.get("/scale").json()  # really the previous release
            model = _scaled_to_2_with_checkpoints(c)
            assert "keyHash" not in model["config"]
    finally:
        old.stop()
    new = Server(data, list(ARGS)).start()
    try:
        with new.client() as c:
            assert c.get("/scale").json()["keyHash"] == "crc32"
            w = SimWorker(c, "w1", "host-a")
            assert w.register().status_code in (200, 201)
            model = wait_for_version(c, 0)
            assert model["config"].get("keyHash", "crc32") == "crc32"  # absent: crc32
            assert c.post("/scale", json={"elasticityFactor": 4}).status_code == 202
            while model["config"]["elasticityFactor"] != 4:
                model = wait_for_version(c, model["version"])
            assert model["config"]["keyHash"] == "crc32"  # a new version names it
            # factor 4's bucket 1_1_4 starts where its factor-2 parent 1_1_2 committed
            cps = c.get("/checkpoints", params={"taskName": "Partition 1_1_4"}).json()
            assert cps["Partition 1_1_4"]["inputOffsets"][0]["offset"] == "5"
        assert "this job's key buckets use crc32" in new.log()
    finally:
        new.stop()
    out = _refused(data, "--key-hash", "xxhash64")
    assert "this job's key hash is crc32 and 4 key-bucket checkpoint entries" in out
