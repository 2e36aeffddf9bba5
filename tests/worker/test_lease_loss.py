"""A lost lease is never fatal to a worker: whichever request finds it gone (a heartbeat,
a commit, a job model poll, an ack), the worker stops processing under it, registers
again with the same id and carries on. Real Kafka, coordinator and Spark; the stateful
counting app; the lease ended through the real API right before the armed request
(``tests.worker.lease_loss_worker``). Afterwards every record is out and every count
is its key's records so far."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import httpx
import pytest

from service.local.kafka import LocalKafka
from tests.service.conftest import StartServer
from tests.worker.test_end_to_end import (
    Producing,
    coordinator_for,
    new_topics,
    read_all,
    stop_workers,
    wait_output,
)
from tests.worker.test_stateful_end_to_end import check_counts

# beside: run in a second pytest process beside the rest of the run (tests/infra/beside.py)
pytestmark = [pytest.mark.slow, pytest.mark.beside]


def registrations(log: Path) -> int:
    return log.read_text().count("registered as w1 at")


def gone(flag: Path) -> bool:
    return not flag.exists()


def logged(log: Path, line: str) -> bool:
    return line in log.read_text()


def registered_since(log: Path, before: int) -> bool:
    return registrations(log) > before


def wait_for(predicate: Callable[[], bool], what: str, worker: subprocess.Popen[bytes], log: Path,
             timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert worker.poll() is None, f"the worker exited:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"{what}:\n{log.read_text()[-4000:]}"
        time.sleep(0.2)


def test_a_lease_lost_on_any_request_path_is_registered_again_and_nothing_is_lost(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(300)
    # a long lease and heartbeat interval: nothing but the armed request ends a lease
    server = coordinator_for(start_server, kafka, topic, "--partition-poll-interval-ms",
                             "1000", "--lease-ttl-ms", "60000", "--elasticity-factor", "2",
                             "--stateful", "--heartbeat-interval-ms", "2000")
    arm = tmp_path / "arm"
    arm.mkdir()
    log = tmp_path / "w1.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.worker.lease_loss_worker", "--coordinator", server.url,
         "--kafka-bootstrap", kafka.bootstrap, "--output-topic", output, "--state-dir",
         str(tmp_path / "state-w1"), "--arm-dir", str(arm)],
        stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ})
    try:
        wait_output(kafka, output, producing.total)
        factor = 2
        for path in ("commit", "heartbeat", "poll", "ack"):
            before = registrations(log)
            (arm / f"arm-{path}").touch()
            if path == "commit":
                producing.send(100)  # a batch to commit
            if path == "ack":  # a version to acknowledge
                factor = 4 if factor == 2 else 2
                with httpx.Client(base_url=server.url, timeout=10) as c:
                    assert c.post("/scale", json={"elasticityFactor": factor}
                                  ).status_code == 202
            wait_for(partial(gone, arm / f"arm-{path}"), f"the {path} path was never taken",
                     worker, log)
            wait_for(partial(logged, log, f"armed {path}: lease lost"),
                     f"the {path} request did not find its lease lost", worker, log)
            wait_for(partial(registered_since, log, before),
                     f"no registration after the {path} path lost the lease", worker, log)
            producing.send(200)
            wait_output(kafka, output, producing.total)
            assert worker.poll() is None, log.read_text()[-4000:]
    finally:
        stop_workers([worker])
    assert worker.returncode == 0, log.read_text()[-4000:]
    check_counts(kafka, output, producing)
    assert len(read_all(kafka, output)) >= producing.total
