"""Workers name the key hashes they compute when they register (``keyHashes``): one that
cannot compute the job's is refused before anything is written, a client that names none
is accepted as the REST contract always allowed (and warned about on a job whose hash is
not crc32), and this release's worker still registers at a coordinator from before the
field (the documented upgrade order: workers first)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.releases import BEFORE_KEY_HASH, release_source
from tests.service.conftest import StartServer
from tests.service.server import Server
from worker.client import CoordinatorClient

JOB = ("--input", "kafka.orders:2", "--debounce-ms", "50")
UNDECLARED = "registered without naming the key hashes it computes"


def test_a_worker_that_cannot_compute_the_jobs_key_hash_is_refused(
    start_server: StartServer,
) -> None:
    server = start_server(*JOB)  # a new job: xxhash64
    with server.client() as c:
        refused = c.post("/processors", json={"processorId": "old", "locationId": "h",
                                              "keyHashes": ["crc32"]})
        assert refused.status_code == 409, refused.text
        assert refused.json() == {"error": "incompatible_worker", "detail": (
            "this job's key buckets use xxhash64, and this worker computes crc32: "
            "upgrade the worker")}
        assert c.get("/processors").json() == []  # nothing written
        ok = c.post("/processors", json={"processorId": "new", "locationId": "h",
                                         "keyHashes": ["xxhash64", "crc32"]})
        assert ok.status_code == 201, ok.text
        # a client naming none: accepted, warned about once (not per registration)
        for status in (201, 200):
            plain = c.post("/processors", json={"processorId": "plain", "locationId": "h"})
            assert plain.status_code == status, plain.text
        assert sorted(p["processorId"] for p in c.get("/processors").json()) == [
            "new", "plain"]
    assert server.log().count(UNDECLARED) == 1, server.log()[-3000:]
    assert "processor plain registered without" in server.log()


def test_a_crc32_job_takes_workers_that_name_no_hashes_without_a_warning(
    start_server: StartServer,
) -> None:
    server = start_server(*JOB, "--key-hash", "crc32")
    with server.client() as c:
        assert c.post("/processors", json={"processorId": "old",
                                           "locationId": "h"}).status_code == 201
        refused = c.post("/processors", json={"processorId": "x", "locationId": "h",
                                              "keyHashes": ["xxhash64"]})
        assert refused.status_code == 409
        assert refused.json()["error"] == "incompatible_worker"
    assert UNDECLARED not in server.log()


@pytest.mark.slow
def test_this_releases_worker_registers_at_a_coordinator_from_before_the_field(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
) -> None:
    old_source = release_source(BEFORE_KEY_HASH, tmp_path_factory.mktemp("old-release"))
    old = Server(tmp_path / "data", list(JOB), launcher=["env", "-C", str(old_source)])
    old.start(timeout_s=60)
    try:
        with old.client() as c:  # really the release before: it refuses the field
            r = c.post("/processors", json={"processorId": "probe", "locationId": "h",
                                            "keyHashes": ["crc32"]})
            assert r.status_code == 422, r.text
        client = CoordinatorClient(old.url, retry_for_s=10)
        registered = client.register("w1", "host-a")  # names its hashes, then not
        assert registered.processor_id == "w1"
        with old.client() as c:
            assert [p["processorId"] for p in c.get("/processors").json()] == ["w1"]
    finally:
        old.stop()
