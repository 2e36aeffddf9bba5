"""An upgrade meets a job of the release before the key hash: its store and per-key state
(crc32 key buckets) are taken over by this release, which keeps the job's crc32, splits
and merges its state with it (count == seq + 1 throughout), and says loudly that the
job's buckets stay empty under a confluent-kafka producer's default partitioner (crc32
too); a hot key shows as a hot bucket."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from common.paths import cache_dir
from service.local.kafka import LocalKafka
from tests.releases import BEFORE_KEY_HASH, release_source
from tests.service.server import Server
from tests.worker.test_end_to_end import (
    Producing,
    new_topics,
    start_worker,
    stop_workers,
    wait_output,
)
from tests.worker.test_stateful_end_to_end import check_counts

# beside: run in a second pytest process beside the rest of the run (tests/infra/beside.py)
pytestmark = [pytest.mark.slow, pytest.mark.beside]
HOT_KEY = "the-hot-key"


def key_buckets(c: httpx.Client, factor: int, ready: str,
                timeout_s: float = 60) -> dict[str, Any]:
    """``/status``'s keyBuckets once judged under ``factor`` with ``ready`` (a key of it)
    non-empty: the counts come with heartbeats after the batches they sampled."""
    deadline = time.monotonic() + timeout_s
    while True:
        found: dict[str, Any] = c.get("/status").json()["keyBuckets"]
        if found["factor"] == factor and found[ready]:
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.5)


def scale(c: httpx.Client, factor: int, timeout_s: float = 120) -> None:
    """``POST /scale``, then wait until the model at ``factor`` is every worker's (its
    barrier done): records sent after it are processed, and their buckets counted, under
    ``factor``. Sent right after the 202, a loaded worker could process them all under
    the old factor, and the counts to judge under the new one would never come."""
    assert c.post("/scale", json={"elasticityFactor": factor}).status_code == 202
    deadline = time.monotonic() + timeout_s
    while True:
        model = c.get("/jobmodel").json()
        if int(model["config"].get("elasticityFactor", 1)) == factor \
                and model["barrier"] == "done":
            return
        assert time.monotonic() < deadline, model
        time.sleep(0.3)


def test_a_previous_release_job_keeps_crc32_its_state_splits_and_merges_and_its_empty_buckets_show(
    kafka: LocalKafka, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
) -> None:
    old_source = release_source(BEFORE_KEY_HASH, tmp_path_factory.mktemp("old-release"))
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)  # confluent-kafka's default partitioner: crc32
    producing.send(600)
    data, blobs = tmp_path / "coordinator", f"file://{tmp_path / 'blobs'}"
    args = ["--kafka-bootstrap", kafka.bootstrap, "--input", f"kafka.{topic}",
            "--debounce-ms", "300", "--partition-poll-interval-ms", "1000",
            "--lease-ttl-ms", "6000", "--elasticity-factor", "2", "--stateful"]

    def worker(url: str, *extra: str, cwd: Path | None = None) -> subprocess.Popen[bytes]:
        # one state folder and location across the upgrade: the state is restored from
        # the previous release's local snapshots
        return start_worker(tmp_path, url, kafka, output, "w0", "--api", "task",
                            "--output-topic", output, "--stateful", "--state-dir",
                            str(tmp_path / "state-w0"), "--blob-store", blobs, *extra,
                            app="tests.worker.apps:count_task", cwd=cwd,
                            env={"COXSWAIN_CACHE_DIR": str(cache_dir())})

    # the previous release: a crc32 job at factor 2 counts 600 records
    old = Server(data, args, launcher=["env", "-C", str(old_source)]).start()
    workers = [worker(old.url, cwd=old_source)]
    try:
        with old.client() as c:
            assert "keyHash" not in c.get("/scale").json()  # really the previous release
        wait_output(kafka, output, producing.total)
        workers[0].send_signal(signal.SIGTERM)  # a graceful leave: its state committed
        assert workers[0].wait(120) == 0
    finally:
        stop_workers(workers)
        old.stop()

    # this release on the same store and state folder
    new = Server(data, [*args, "--bucket-signal-min-records", "100"], env=dict(os.environ))
    new.start()
    workers = [worker(new.url)]
    try:
        with new.client() as c:
            assert c.get("/scale").json()["keyHash"] == "crc32"
            producing.send(300)
            wait_output(kafka, output, producing.total)
            # both partitions' keys fill one bucket each: crc32 mod 2 is the partition
            empty = key_buckets(c, 2, "emptyBuckets")
            assert sorted(e["partition"] for e in empty["emptyBuckets"]) == [0, 1]
            assert "start a new job, which uses xxhash64" in empty["advice"]
            assert c.get("/status").json()["keyHash"] == "crc32"
            # split: factor 4 (its state composed with crc32), a hot key among the others
            scale(c, 4)
            producing.send(300)
            producing.send_key(HOT_KEY, 600)
            wait_output(kafka, output, producing.total)
            hot = key_buckets(c, 4, "hotBuckets")["hotBuckets"]
            assert len(hot) == 1 and hot[0]["share"] >= 0.625, hot
            # merge: factor 1
            scale(c, 1)
            producing.send(300)
            wait_output(kafka, output, producing.total)
            assert c.get("/scale").json()["elasticityFactor"] == 1
        assert "this job's key buckets use crc32" in new.log()
    finally:
        stop_workers(workers)
        new.stop()
    check_counts(kafka, output, producing)
