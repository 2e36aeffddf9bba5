"""A worker's query that dies of an infrastructure failure is started again in the same
process, its tasks from their checkpoints (issue #49): a real fault, the Spark Python
worker processes of a stateful worker killed while batches run, then counts exact
(count == seq + 1 on every output record), nothing lost, the lease and the tasks kept.
A failure in the app's own code still ends the worker, its traceback first."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.local.kafka import LocalKafka
from tests.service.conftest import StartServer
from tests.worker.test_end_to_end import (
    Producing,
    coordinator_for,
    new_topics,
    queries_started,
    stop_workers,
    wait_output,
)
from tests.worker.test_stateful_end_to_end import check_counts, stateful_worker

pytestmark = pytest.mark.slow


def python_workers_of(pid: int) -> list[int]:
    """The pids of Spark's Python worker processes (``pyspark.daemon`` and its forks)
    under process ``pid``."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
        names[int(entry)] = cmd
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            if "pyspark.daemon" in names.get(child, ""):
                found.append(child)
    return found


def test_python_workers_killed_mid_batch_restart_the_query_with_counts_exact(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(400)
    server = coordinator_for(start_server, kafka, topic, "--stateful")
    worker = stateful_worker(tmp_path, server, kafka, output, "w1",
                             f"file://{tmp_path / 'blobs'}", "--query-restart-window-s", "600")
    try:
        wait_output(kafka, output, producing.total)
        # kill every Python worker of w1 while batches run, until its query died of it
        log = tmp_path / "w1.log"
        deadline = time.monotonic() + 90
        while "the query died, not in the app's code" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            producing.send(40)
            for pid in python_workers_of(worker.pid):
                with contextlib.suppress(ProcessLookupError):  # (gone meanwhile)
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        producing.send(400)  # processed by the new query
        wait_output(kafka, output, producing.total)
        with server.client() as c:
            deadline = time.monotonic() + 60
            while True:
                stats = {p["processorId"]: p.get("stats") or {}
                         for p in c.get("/status").json()["processors"]}
                if stats.get("w1", {}).get("queryRestarts", 0) >= 1:
                    break
                assert time.monotonic() < deadline, stats
                time.sleep(0.5)
            assert stats["w1"]["lastQueryRestart"]["cause"]
            # the lease and its tasks were kept: no version after the first placement
            assert c.get("/jobmodel").json()["version"] == 2
        assert worker.poll() is None  # still running
        text = log.read_text()
        assert len(re.findall(r"registered as w1", text)) == 1, text[-3000:]
        assert queries_started(tmp_path, "w1")[0] >= 2  # a new query in the same process
    finally:
        stop_workers([worker])
    check_counts(kafka, output, producing)


def test_a_failure_in_the_apps_code_ends_the_worker_with_its_traceback_first(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    topic, output = new_topics(kafka, 1)
    producing = Producing(kafka, topic)
    producing.send(10)
    server = coordinator_for(start_server, kafka, topic)
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "worker", "--coordinator", server.url,
         "--app", "tests.worker.apps:failing_task", "--api", "task", "--output-topic",
         output, "--kafka-bootstrap", kafka.bootstrap, "--processor-id", "w1",
         "--spark-master", "local[1]"],
        capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 1, result.stderr[-3000:]
    message = result.stderr[result.stderr.index("coxswain worker: the query died"):]
    assert message.startswith("coxswain worker: the query died in the app's code")
    lines = message.splitlines()
    assert lines[1] == "Traceback (most recent call last):", message[:2000]
    assert lines[-1] == "ValueError: an order without an amount", message[:2000]
    assert "tests/worker/apps.py" in message
    assert "the query died, not in the app's code" not in result.stderr  # no restart
