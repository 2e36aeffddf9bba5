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
from typing import Any, Protocol

import pytest

from service.local.kafka import LocalKafka
from service.local.ports import stop_process_group
from tests.service.conftest import StartServer
from tests.worker.test_end_to_end import (
    Producing,
    coordinator_for,
    new_topics,
    queries_started,
    start_worker,
    stop_workers,
    wait_output,
)
from tests.worker.test_exactly_once_end_to_end import (
    check_exactly_once,
    read_committed,
    wait_committed,
)
from tests.worker.test_stateful_end_to_end import check_counts, stateful_worker

pytestmark = pytest.mark.slow


def python_workers_of(pid: int, names: tuple[str, ...] = ("pyspark.daemon",)) -> list[int]:
    """The pids of the processes under process ``pid`` whose command line names one of
    ``names`` (by default Spark's Python workers: ``pyspark.daemon`` and its forks)."""
    children: dict[int, list[int]] = {}
    command: dict[int, str] = {}
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
        command[int(entry)] = cmd
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            todo.append(child)
            if any(n in command.get(child, "") for n in names):
                found.append(child)
    return found


class Sending(Protocol):
    """What produces the job's input (a Kafka topic's or a Kinesis stream's producer)."""

    def send(self, n: int) -> None: ...


def kill_until_restarted(worker: subprocess.Popen[bytes], log: Path,
                         producing: Sending, names: tuple[str, ...] = ("pyspark.daemon",)
                         ) -> None:
    """kill -9 of ``worker``'s Python worker processes (those whose command line names
    one of ``names``) while batches run, until its log says its query died of it."""
    deadline = time.monotonic() + 90
    while "the query died, not in the app's code" not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        assert worker.poll() is None, log.read_text()[-3000:]
        producing.send(40)
        for pid in python_workers_of(worker.pid, names):
            with contextlib.suppress(ProcessLookupError):  # (gone meanwhile)
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def current_version(server: Any) -> int:
    """The job model version the coordinator serves now."""
    with server.client() as c:
        return int(c.get("/jobmodel").json()["version"])


def restarted_in_place(server: Any, worker: subprocess.Popen[bytes], log: Path,
                       pid: str, version: int) -> None:
    """``pid``'s stats count a query restart with its cause, its lease and tasks were
    kept (the job model still at ``version``, the one before the fault), and it
    registered once."""
    with server.client() as c:
        deadline = time.monotonic() + 60
        while True:
            stats = {p["processorId"]: p.get("stats") or {}
                     for p in c.get("/status").json()["processors"]}
            if stats.get(pid, {}).get("queryRestarts", 0) >= 1:
                break
            assert time.monotonic() < deadline, stats
            time.sleep(0.5)
        assert stats[pid]["lastQueryRestart"]["cause"]
        assert c.get("/jobmodel").json()["version"] == version
    assert worker.poll() is None  # still running
    text = log.read_text()
    assert len(re.findall(rf"registered as {pid}", text)) == 1, text[-3000:]


def test_python_workers_killed_mid_batch_restart_the_query_with_counts_exact(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(400)
    server = coordinator_for(start_server, kafka, topic, "--stateful")
    # (its batches run in Spark's Python workers, the ones killed: none in the driver)
    worker = stateful_worker(tmp_path, server, kafka, output, "w1",
                             f"file://{tmp_path / 'blobs'}", "--query-restart-window-s", "600",
                             "--driver-batch-records", "0")
    try:
        wait_output(kafka, output, producing.total)
        version = current_version(server)
        # kill every Python worker of w1 while batches run, until its query died of it
        log = tmp_path / "w1.log"
        kill_until_restarted(worker, log, producing)
        producing.send(400)  # processed by the new query
        wait_output(kafka, output, producing.total)
        # the lease and its tasks were kept: no version since
        restarted_in_place(server, worker, log, "w1", version)
        assert queries_started(tmp_path, "w1")[0] >= 2  # a new query in the same process
    finally:
        stop_workers([worker])
    check_counts(kafka, output, producing)


@pytest.mark.parametrize("where", ["driver", "spark"])
def test_a_failure_in_the_apps_code_ends_the_worker_with_its_traceback_first(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path, where: str,
) -> None:
    """... whether the failing batch ran in the driver (one record, once the driver's
    clients are made: ``worker.runtime.driver_batches``) or in a Spark task."""
    topic, output = new_topics(kafka, 1)
    producing = Producing(kafka, topic)
    producing.send(10)
    server = coordinator_for(start_server, kafka, topic)
    err = tmp_path / "w1.err"
    with err.open("w") as stderr_file:
        worker = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker", "--coordinator", server.url,
             "--app", "tests.worker.apps:poisoned_task", "--api", "task", "--output-topic",
             output, "--kafka-bootstrap", kafka.bootstrap, "--processor-id", "w1",
             "--spark-master", "local[1]",
             *(["--driver-batch-records", "0"] if where == "spark" else [])],
            stdout=subprocess.DEVNULL, stderr=stderr_file, start_new_session=True)
    try:
        wait_output(kafka, output, 10)
        if where == "driver":  # a record at a time until the driver runs their batches
            with server.client() as c:
                deadline = time.monotonic() + 90
                while not any((p.get("stats") or {}).get("batchesInDriver")
                              for p in c.get("/status").json()["processors"]):
                    assert time.monotonic() < deadline, err.read_text()[-3000:]
                    producing.send(1)
                    time.sleep(0.5)
        producing.producer.produce(topic, key=b"key-poison", value=b"poison")
        producing.producer.flush(30)
        worker.wait(180)
    finally:
        stop_process_group(worker, grace_s=30)
    stderr = err.read_text()
    assert worker.returncode == 1, stderr[-3000:]
    message = stderr[stderr.index("coxswain worker: the query died"):]
    assert message.startswith("coxswain worker: the query died in the app's code")
    lines = message.splitlines()
    assert lines[1] == "Traceback (most recent call last):", message[:2000]
    assert lines[-1] == "ValueError: an order without an amount", message[:2000]
    assert "tests/worker/apps.py" in message
    assert ("in run_in_driver" in message) == (where == "driver"), message[:3000]
    assert "the query died, not in the app's code" not in stderr  # no restart


@pytest.mark.beside  # in the second process (tests/infra/beside.py)
def test_a_stateless_exactly_once_worker_restarts_its_query_and_duplicates_nothing(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    """The same fault under a stateless worker writing its output in Kafka transactions:
    the batch the fault ended wrote no committed record; the new query redoes it from
    the tasks' checkpoints: every record once in the committed output."""
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(400)
    server = coordinator_for(start_server, kafka, topic)
    worker = start_worker(tmp_path, server.url, kafka, output, "w1", "--api", "task",
                          "--output-topic", output, "--exactly-once",
                          "--query-restart-window-s", "600",
                          "--driver-batch-records", "0",  # (Spark's workers are killed)
                          app="tests.worker.apps:slow_echo_task")
    workers = {"w1": worker}
    try:
        wait_committed(kafka, output, producing.total, workers, tmp_path)
        version = current_version(server)
        log = tmp_path / "w1.log"
        kill_until_restarted(worker, log, producing)
        producing.send(400)
        wait_committed(kafka, output, producing.total, workers, tmp_path)
        restarted_in_place(server, worker, log, "w1", version)
    finally:
        stop_workers([worker])
    check_exactly_once(read_committed(kafka, output), producing, counts=False)
