"""A blob-store outage is never fatal: the S3 API server made unreachable (a relay the
test cuts; moto keeps its data) for 20 s and then for 120 s under a running stateful
job, two workers with one standby each. Processing goes on within the commit delay,
then waits; commits fail, are tried again and resume within seconds of the store's
return; no worker exits; nothing is lost and every count is its key's records so far.

Most of its three minutes are the outages' waiting: the run starts it beside the fast
tests, in a background lane of its own (``tests/infra/background.py``), as a pytest run
of this test alone with its own Kafka and S3 servers; the test in the run checks that
run's outcome and output. Run alone (``pytest`` on this file), it runs that way at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.local.kafka import LocalKafka
from service.local.s3 import LocalS3
from tests.infra import background
from tests.infra.relay import Relay
from tests.service.conftest import StartServer
from tests.worker.test_end_to_end import (
    Producing,
    coordinator_for,
    new_topics,
    read_all,
    stop_workers,
    wait_output,
)
from tests.worker.test_stateful_end_to_end import check_counts, stateful_worker

pytestmark = pytest.mark.slow


def committed(c: httpx.Client, pids: list[str]) -> int:
    """The sum of every committed next offset of the processors' tasks."""
    total = 0
    for pid in pids:
        r = c.get("/checkpoints", params={"processorId": pid})
        if r.status_code != 200:
            continue
        for task in r.json().values():
            total += sum(int(o["offset"]) for o in task["inputOffsets"]
                         if o["offset"].isdigit())
    return total


def wait_committed(c: httpx.Client, pids: list[str], expected: int,
                   timeout_s: float = 60) -> int:
    """Wait until the processors' commits cover ``expected`` (every task's next offset
    summed): output comes before its commit, so a commit may still be on its way when
    every record is out, and land after a cut that comes next."""
    deadline = time.monotonic() + timeout_s
    while (got := committed(c, pids)) != expected:
        assert got < expected, f"committed {got} past the {expected} produced"
        assert time.monotonic() < deadline, f"committed {got} of {expected}"
        time.sleep(0.2)
    return got


def alive(workers: dict[str, Any], tmp: Path) -> None:
    for name, w in workers.items():
        assert w.poll() is None, (tmp / f"{name}.log").read_text()[-4000:]


#: set in the pytest run the background job starts: there the scenario itself runs
IN_SCENARIO = "COXSWAIN_TEST_OUTAGE_SCENARIO"
SCENARIO = "test_blob_store_outages_of_20_and_120_seconds_cost_no_worker_and_no_record"


def run_scenario(runner: background.Runner) -> subprocess.CompletedProcess[str]:
    return runner.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
         f"{__file__}::{SCENARIO}"], timeout_s=900,
        env={**os.environ, IN_SCENARIO: "1"}, cwd=Path(__file__).resolve().parents[2])


OUTAGES = background.Job("blob-store outages", run_scenario, checked_by=(SCENARIO,),
                         lane="waits")
BACKGROUND_JOBS = [] if os.environ.get(IN_SCENARIO) else [OUTAGES]


def test_blob_store_outages_of_20_and_120_seconds_cost_no_worker_and_no_record(
    request: pytest.FixtureRequest, tmp_path: Path,
) -> None:
    if not os.environ.get(IN_SCENARIO):
        run: subprocess.CompletedProcess[str] = background.result(request.config, OUTAGES)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-6000:]
        assert "1 passed" in out and "commits resumed" in out, out[-3000:]
        print(next(line for line in out.splitlines() if "commits resumed" in line))
        return
    start_server: StartServer = request.getfixturevalue("start_server")
    kafka: LocalKafka = request.getfixturevalue("kafka")
    s3_server: LocalS3 = request.getfixturevalue("s3_server")
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(400)
    server = coordinator_for(start_server, kafka, topic, "--partition-poll-interval-ms",
                             "1000", "--elasticity-factor", "2", "--stateful",
                             "--num-standbys", "1", "--lease-ttl-ms", "20000")
    bucket = f"outage-{uuid.uuid4().hex[:8]}"
    s3_server.create_bucket(bucket)
    relay = Relay(("127.0.0.1", s3_server.port))
    relay.restore()
    workers = {pid: stateful_worker(tmp_path, server, kafka, output, pid,
                                    f"s3://{bucket}/job", "--blob-store-endpoint",
                                    relay.endpoint, "--max-commit-delay-ms", "10000")
               for pid in ("w0", "w1")}
    resumed: list[float] = []
    try:
        wait_output(kafka, output, producing.total)
        with server.client() as c:
            for outage_s in (20, 120):
                # every task of a partition (F = 2) commits that partition's end
                before = wait_committed(c, list(workers), 2 * producing.total)
                seen = len(read_all(kafka, output))  # everything so far is out
                relay.cut()
                cut_at = time.monotonic()
                producing.send(200)
                # processing goes on while commits fail (within the commit delay)
                while len(read_all(kafka, output)) == seen:
                    alive(workers, tmp_path)
                    assert time.monotonic() - cut_at < outage_s, "no output in the outage"
                    time.sleep(0.5)
                while time.monotonic() - cut_at < outage_s:  # records keep coming: past
                    alive(workers, tmp_path)  # the commit delay, processing waits
                    producing.send(10)
                    time.sleep(1)
                assert committed(c, list(workers)) == before  # nothing committed meanwhile
                relay.restore()
                back_at = time.monotonic()
                while committed(c, list(workers)) <= before:
                    alive(workers, tmp_path)
                    # commits are retried at most 5 s apart (plus jitter); generous for load
                    assert time.monotonic() - back_at < 60, "commits did not resume"
                    time.sleep(0.2)
                resumed.append(time.monotonic() - back_at)
                producing.send(200)
                wait_output(kafka, output, producing.total)
                alive(workers, tmp_path)
            failures = [(p.get("stats") or {}).get("commitFailures", 0)
                        for p in c.get("/status").json()["processors"]]
    finally:
        relay.cut()
        stop_workers(list(workers.values()))
    print(f"commits resumed {', '.join(f'{s:.1f}' for s in resumed)} s after the store "
          "came back")
    assert all(w.returncode == 0 for w in workers.values())
    assert sum(failures) > 0  # commits did fail, and were tried again
    check_counts(kafka, output, producing)
    logs = "".join((tmp_path / f"{pid}.log").read_text() for pid in workers)
    assert "trying again" in logs and "processing waits for it" in logs
