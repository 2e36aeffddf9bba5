"""A worker killed -9 while it restores 100 MB of state is replaced through its closed
long poll, not its lease: the long poll runs on a thread of its own, so a restore never
silences it (issue #30). The restore is kept going for about 10 s by a relay capping the
workers' link to the S3 API server at 10 MB/s; the lease is 60 s, so only the closed poll
explains a replacement within seconds. The survivor then restores the same 100 MB and
every count stays exact."""

from __future__ import annotations

import re
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.local.kafka import LocalKafka
from service.local.s3 import LocalS3
from tests.infra.relay import Relay
from tests.service.conftest import StartServer
from tests.worker.test_end_to_end import (
    Producing,
    coordinator_for,
    crash,
    new_topics,
    queries_started,
    start_worker,
    stop_workers,
    wait_output,
)
from tests.worker.test_stateful_end_to_end import check_counts

# beside: run in a second pytest process beside the rest of the run (tests/infra/beside.py)
pytestmark = [pytest.mark.slow, pytest.mark.beside]
FAT_KEYS = 100  # 1 MB of state each


def holders(c: httpx.Client) -> tuple[int, str, dict[str, list[str]]]:
    """The latest job model's version, barrier and each processor's active tasks."""
    m = c.get("/jobmodel").json()
    return int(m["version"]), m["barrier"], {
        pid: sorted(n for n, t in ct["tasks"].items() if t.get("taskMode", "Active")
                    == "Active") for pid, ct in m["containers"].items()}


def wait_until(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_worker_killed_while_restoring_100_mb_is_replaced_through_its_closed_poll(
    start_server: StartServer, kafka: LocalKafka, s3_server: LocalS3, tmp_path: Path,
) -> None:
    topic, output = new_topics(kafka, 1)
    producing = Producing(kafka, topic)
    for i in range(FAT_KEYS):
        producing.producer.produce(topic, key=f"fat-{i}".encode(), value=b"0")
        producing.seq[f"fat-{i}"] = 1
    producing.total += FAT_KEYS
    producing.send(200)
    server = coordinator_for(start_server, kafka, topic, "--partition-poll-interval-ms",
                             "1000", "--elasticity-factor", "1", "--stateful",
                             "--lease-ttl-ms", "60000")
    bucket = f"fat-{uuid.uuid4().hex[:8]}"
    s3_server.create_bucket(bucket)
    slow = Relay(("127.0.0.1", s3_server.port), bytes_per_s=10_000_000)
    slow.restore()

    def worker(pid: str, endpoint: str) -> Any:
        return start_worker(tmp_path, server.url, kafka, output, pid, "--api", "task",
                            "--output-topic", output, "--stateful", "--state-dir",
                            str(tmp_path / f"state-{pid}"), "--blob-store",
                            f"s3://{bucket}/job", "--blob-store-endpoint", endpoint,
                            app="tests.worker.apps:fat_count_task")

    workers = {"w0": worker("w0", s3_server.endpoint)}
    try:
        wait_output(kafka, output, producing.total)  # w0 holds 100 MB of state
        for pid in ("w1", "w2"):  # through the slow link, idle while w0 holds the task
            workers[pid] = worker(pid, slow.endpoint)
        with server.client() as c:
            wait_until(lambda: set(holders(c)[2]) == {"w0", "w1", "w2"}
                       and holders(c)[1] == "done", 240, "three workers in the model")
            assert holders(c)[2]["w0"], holders(c)  # w0 kept the task (its state is there)
            workers["w0"].send_signal(signal.SIGTERM)  # its last commit done, it leaves
            assert workers["w0"].wait(120) == 0
            wait_until(lambda: "w0" not in holders(c)[2] and holders(c)[1] == "done", 60,
                       "w0 gone")
            version, _, tasks = holders(c)
            victim = next(pid for pid, names in tasks.items() if names)
            survivor = ({"w1", "w2"} - {victim}).pop()
            log = tmp_path / f"{victim}.log"
            wait_until(lambda: f"version {version}: starting" in log.read_text(), 60,
                       f"{victim} starting its tasks")
            time.sleep(1.5)  # well into its 10 s restore
            assert f"version {version}: running" not in log.read_text(), \
                "the restore was over before the kill"
            crash(workers[victim])  # kill -9 while it restores: its poll closes
            killed = time.monotonic()
            wait_until(lambda: victim not in holders(c)[2], 30,
                       f"{victim} still in the model 30 s after its kill (lease 60 s)")
            replaced_s = time.monotonic() - killed
            producing.send(200)
            wait_output(kafka, output, producing.total)
            assert holders(c)[2][survivor], holders(c)
    finally:
        slow.cut()
        stop_workers(list(workers.values()))
    print(f"{victim} killed while restoring 100 MB; out of the model {replaced_s:.1f} s "
          "later (lease 60 s)")
    assert replaced_s < 20, replaced_s  # the closed poll (1.5 s grace), not the lease
    check_counts(kafka, output, producing)
    restored = re.findall(r"state restored from \S+ \([\w-]+, (\d+) bytes",
                          (tmp_path / f"{survivor}.log").read_text())
    assert restored and max(int(b) for b in restored) >= FAT_KEYS * 1_000_000, restored
    for pid in ("w0", survivor):
        assert queries_started(tmp_path, pid) == [1]
