"""Stateful tasks end to end (real Kafka, coordinator, PySpark workers as processes, state
backed up to a blob store): a counting app keeps a counter per key in ``ctx.state`` and
outputs (key, seq, count). Exactly-once effect on state means count == seq + 1 on every
output record, duplicates included, across a crash and restart on the same host (restored
from local files, zero bytes downloaded) and a crash whose tasks restore elsewhere."""

from __future__ import annotations

import re
import signal
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.local.kafka import LocalKafka
from service.local.s3 import LocalS3
from tests.service.conftest import StartServer
from tests.worker.test_end_to_end import (
    Producing,
    coordinator_for,
    crash,
    new_topics,
    queries_started,
    read_all,
    start_worker,
    stop_workers,
    wait_output,
)

pytestmark = pytest.mark.slow


def restores_of(c: httpx.Client, pid: str,
                done: Callable[[dict[str, Any]], bool] = bool,
                timeout_s: float = 90) -> dict[str, Any]:
    """The state restores ``pid`` reported in its heartbeats' stats, once ``done`` holds
    for them (stats arrive with the next heartbeat, after the batch that made them)."""
    deadline = time.monotonic() + timeout_s
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        for p in c.get("/status").json()["processors"]:
            if p["processorId"] == pid:
                seen = dict((p.get("stats") or {}).get("stateRestores") or {})
        if seen and done(seen):
            return seen
        time.sleep(0.5)
    raise AssertionError(f"{pid} reported no such state restores; last seen {seen}")


def settled(c: httpx.Client, pids: list[str], timeout_s: float = 120) -> dict[str, Any]:
    """The latest job model once it has exactly ``pids``, its barrier is done and it has
    no warm-up left (a job without standbys: every ``Standby`` task is a warm-up, and
    its active moves by a probing rebalance once the copy caught up; KIP-441)."""
    deadline = time.monotonic() + timeout_s
    while True:
        model: dict[str, Any] = c.get("/jobmodel").json()
        containers = model.get("containers", {})
        warming = [n for ct in containers.values() for n, t in ct.get("tasks", {}).items()
                   if t.get("taskMode") == "Standby"]
        if (sorted(containers) == sorted(pids) and model["barrier"] == "done"
                and not warming):
            return model
        assert time.monotonic() < deadline, model
        time.sleep(0.3)


def check_counts(kafka: LocalKafka, output: str, producing: Producing) -> None:
    """count == seq + 1 on every output record; nothing lost; per-key order."""
    records = read_all(kafka, output)
    wrong = [r for r in records if r["count"] != r["seq"] + 1]
    assert not wrong, wrong[:5]  # every count is exactly the key's records so far
    per_key: dict[str, list[int]] = defaultdict(list)
    seen: set[tuple[str, int]] = set()
    for r in records:
        if (r["key"], r["seq"]) not in seen:
            seen.add((r["key"], r["seq"]))
            per_key[r["key"]].append(r["seq"])
    assert {k: sorted(v) for k, v in per_key.items()} == {
        k: list(range(n)) for k, n in producing.seq.items()}  # nothing lost
    for key, seqs in per_key.items():
        assert seqs == sorted(seqs), (key, seqs[:20])


def stateful_worker(tmp_path: Path, server: Any, kafka: LocalKafka, output: str, pid: str,
                    blobs: str, *extra: str) -> Any:
    """A worker running the counting app with state under ``tmp_path/state-{pid}``."""
    return start_worker(tmp_path, server.url, kafka, output, pid, "--api", "task",
                        "--output-topic", output, "--stateful", "--state-dir",
                        str(tmp_path / f"state-{pid}"), "--blob-store", blobs, *extra,
                        app="tests.worker.apps:count_task")


def split_reads_job(start_server: StartServer, kafka: LocalKafka
                    ) -> tuple[str, Producing, Any]:
    """(output topic, its producing, the coordinator) of a job whose batches split their
    reads on ``local[4]``: 8 stateful tasks (factor 4) over 2 partitions, 600 records
    sent; the lease outlives a worker's restart."""
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(600)
    server = coordinator_for(start_server, kafka, topic, "--elasticity-factor", "4",
                             "--stateful", "--lease-ttl-ms", "600000",
                             "--poll-close-grace-ms", "0")
    return output, producing, server


def test_counts_stay_exact_when_a_batch_splits_its_reads_among_the_tasks(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    """8 tasks with state over 2 partitions on 4 cores: each partition read by two Spark
    tasks, each running and snapshotting its own share of the partition's tasks
    (``task_reads.split_reads``), and a crash between batches restores them exactly."""
    output, producing, server = split_reads_job(start_server, kafka)
    blobs = f"file://{tmp_path / 'blobs'}"

    def worker() -> Any:
        return stateful_worker(tmp_path, server, kafka, output, "w0", blobs,
                               "--spark-master", "local[4]",
                               "--log-level", "INFO,coxswain.worker.batches=DEBUG")

    w0 = worker()
    try:
        wait_output(kafka, output, producing.total)
        crash(w0)
        w0 = worker()  # its tasks back from its own snapshots
        for _ in range(3):
            producing.send(200)
            time.sleep(0.3)
        wait_output(kafka, output, producing.total)
    finally:
        stop_workers([w0])
    log = (tmp_path / "w0.log").read_text()
    assert re.search(r"batch \d+: \d+ ranges read by 4 Spark tasks", log), log[-3000:]
    check_counts(kafka, output, producing)


def trickle_in_the_driver(start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
                          wait: Callable[[str, int, Any], object], *extra: str
                          ) -> tuple[str, Producing]:
    """(output topic, its producing) of a stateful job (factor 2 over 2 partitions) whose
    backlogs run in Spark and whose trickle (a record at a time) runs in the driver
    (``worker.runtime.driver_batches``), with a kill -9 after driver batches: the
    worker's tasks restore the snapshots those took. ``wait(output, total, worker)``
    waits for the output; ``extra``: the worker's further options. Checks that at least
    8 batches ran in the driver and some in Spark."""
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(400)
    server = coordinator_for(start_server, kafka, topic, "--elasticity-factor", "2",
                             "--stateful", "--lease-ttl-ms", "600000",
                             "--poll-close-grace-ms", "0")
    blobs = f"file://{tmp_path / 'blobs'}"

    def worker() -> Any:
        return stateful_worker(tmp_path, server, kafka, output, "w0", blobs, *extra,
                               "--log-level", "INFO,coxswain.worker.batches=DEBUG")

    def trickle(n: int) -> None:
        for _ in range(n):
            producing.send(1)
            time.sleep(0.4)  # (longer than a trigger: a batch each)

    w0 = worker()
    try:
        wait(output, producing.total, w0)
        trickle(10)
        wait(output, producing.total, w0)
        with server.client() as c:
            deadline = time.monotonic() + 60
            while not any((p.get("stats") or {}).get("batchesInDriver")
                          for p in c.get("/status").json()["processors"]):
                assert time.monotonic() < deadline, "no batch ran in the driver"
                time.sleep(0.5)
        crash(w0)
        w0 = worker()  # its tasks back from the snapshots the driver's batches took
        trickle(6)
        producing.send(400)
        wait(output, producing.total, w0)
    finally:
        stop_workers([w0])
    log = (tmp_path / "w0.log").read_text()
    in_driver = len(re.findall(r"batch \d+: \d+ records, run in the driver", log))
    run = len(re.findall(r"batch \d+ v\d+ cid \S+ read", log))  # every batch, either path
    assert in_driver >= 8 and run > in_driver, (in_driver, run)
    return output, producing


def test_small_batches_run_in_the_driver_on_the_same_state_and_survive_a_crash(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    output, producing = trickle_in_the_driver(
        start_server, kafka, tmp_path,
        lambda topic, total, _worker: wait_output(kafka, topic, total))
    check_counts(kafka, output, producing)


def test_counts_survive_crashes_and_restore_from_local_files_or_the_blob_store(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    topic, output = new_topics(kafka, 4)
    producing = Producing(kafka, topic)
    producing.send(1000)
    # --poll-close-grace-ms 0: the lease alone decides, so a worker restarting within it
    # keeps its tasks (a closed long poll would otherwise move them within seconds). The
    # lease is longer than any restart: a Spark start on a loaded machine once took more
    # than 40 s, and the tasks moved. When w1 is gone for good, an operator removes it
    # (as the lease would, later)
    server = coordinator_for(start_server, kafka, topic, "--partition-poll-interval-ms",
                             "1000", "--lease-ttl-ms", "600000", "--elasticity-factor", "2",
                             "--stateful", "--poll-close-grace-ms", "0")
    blobs = f"file://{tmp_path / 'blobs'}"

    def worker(pid: str) -> Any:
        return stateful_worker(tmp_path, server, kafka, output, pid, blobs)

    workers = {pid: worker(pid) for pid in ("w0", "w1")}
    try:
        wait_output(kafka, output, producing.total)
        with server.client() as c:
            # w1's tasks once both workers run and the assignment settled (the first
            # output may come from a version that had w1 alone, and w1 gets some tasks
            # as warm-ups first, their actives moving to it a little later)
            mine = actives(settled(c, ["w0", "w1"]), "w1")
            restores_of(c, "w1", lambda r: sorted(r) == mine)
            # w1 dies mid-run and comes back at once, within its lease: its tasks wait for
            # it and restore from the snapshots on its own disk
            for _ in range(3):
                producing.send(100)
                time.sleep(0.3)
            crash(workers["w1"])
            workers["w1"] = worker("w1")
            producing.send(300)
            wait_output(kafka, output, producing.total)
            # the new incarnation's restores (the old one's were all "empty")
            back = restores_of(c, "w1", lambda r: any(x["source"] != "empty"
                                                      for x in r.values()))
            assert sorted(back) == mine
            restored = [r for r in back.values() if r["source"] != "empty"]
            assert restored, back
            assert all(r["source"] == "local" and r["bytes"] == 0 for r in restored), back
            # w1 dies for good and is removed: w0 restores its tasks from the blob store
            crash(workers["w1"])
            assert c.delete("/processors/w1").status_code == 204
            for _ in range(4):
                producing.send(100)
                time.sleep(0.5)
            wait_output(kafka, output, producing.total)
            taken = restores_of(c, "w0", lambda r: set(mine) <= set(r))
            moved = {t: r for t, r in taken.items() if t in mine}
            assert moved and any(r["source"] == "remote" and r["bytes"] > 0
                                 for r in moved.values()), taken
            # and the coordinator exports them
            assert 'coxswain_state_restore_bytes{processor="w0",source="remote"' in c.get(
                "/metrics").text
    finally:
        stop_workers(list(workers.values()))
    check_counts(kafka, output, producing)


def test_a_killed_workers_tasks_resume_on_its_standby_without_a_full_download(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path, s3_server: LocalS3,
) -> None:
    """One standby per task, state backed up to an S3 API server: the standby copies
    follow the committed snapshots, so when a worker is killed its tasks resume where a
    standby already holds their state."""
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(600)
    server = coordinator_for(start_server, kafka, topic, "--partition-poll-interval-ms",
                             "1000", "--lease-ttl-ms", "8000", "--elasticity-factor", "2",
                             "--stateful", "--num-standbys", "1")
    bucket = f"standbys-{uuid.uuid4().hex[:8]}"
    s3_server.create_bucket(bucket)
    blobs = f"s3://{bucket}/job"
    extra = ("--blob-store-endpoint", s3_server.endpoint)
    workers = {pid: stateful_worker(tmp_path, server, kafka, output, pid, blobs, *extra)
               for pid in ("w0", "w1")}
    try:
        wait_output(kafka, output, producing.total)
        with server.client() as c:
            for _ in range(5):  # more state; the standbys follow each commit
                producing.send(100)
                time.sleep(1)
            wait_output(kafka, output, producing.total)
            w1_tasks = actives(c.get("/jobmodel").json(), "w1")
            assert w1_tasks
            # w0's standby copies of them hold their last committed snapshots (w0 says
            # so in its heartbeats: a state lag of 0, KIP-441's measure)
            deadline = time.monotonic() + 90
            while not all(standby_lag(c, "w0", t) == 0 for t in w1_tasks):
                assert time.monotonic() < deadline, c.get("/status").json()["processors"]
                time.sleep(0.5)
            crash(workers["w1"])
            producing.send(200)
            wait_output(kafka, output, producing.total)
            taken = restores_of(c, "w0", lambda r: set(w1_tasks) <= set(r))
            moved = [taken[t] for t in w1_tasks]
            assert all(r["source"] in ("local", "partial") for r in moved), taken
            assert any(r["source"] == "local" and r["bytes"] == 0 for r in moved), taken
    finally:
        stop_workers(list(workers.values()))
    check_counts(kafka, output, producing)


def standby_lag(c: httpx.Client, pid: str, task: str) -> int | None:
    """The state lag of ``pid``'s copy of ``task`` in its last heartbeat (None: none)."""
    for p in c.get("/status").json()["processors"]:
        if p["processorId"] == pid:
            lag = p.get("taskLags", {}).get(task)
            return None if lag is None else int(lag)
    return None


def actives(model: dict[str, Any], pid: str) -> list[str]:
    tasks = model["containers"].get(pid, {}).get("tasks", {})
    return sorted(n for n, t in tasks.items() if t["taskMode"] == "Active")


@pytest.mark.beside  # in the second process (tests/infra/beside.py)
def test_a_warm_scale_out_a_graceful_leave_and_a_kill_keep_every_count_exact(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    """w0 alone; w1 joins and gets warm-ups first: the actives move once the copies are
    caught up, long before the 10-minute probing timer (KIP-441, event-driven probing);
    w2 joins; w0 leaves gracefully; w1 is killed -9 mid-run and its tasks restore on w2.
    Meanwhile the blob store is collected every 2 s (grace 5 s): restores keep working and
    the indexes do not pile up."""
    topic, output = new_topics(kafka, 4)
    producing = Producing(kafka, topic)
    producing.send(1000)
    server = coordinator_for(start_server, kafka, topic, "--partition-poll-interval-ms",
                             "1000", "--lease-ttl-ms", "6000", "--elasticity-factor", "2",
                             "--stateful", "--probing-interval-ms", "600000",
                             "--probing-min-interval-ms", "1000",
                             "--acceptable-recovery-lag", "400")
    blob_dir = tmp_path / "blobs"
    gc = ("--blob-gc-interval-s", "2", "--blob-gc-grace-s", "5")

    def worker(pid: str) -> Any:
        return stateful_worker(tmp_path, server, kafka, output, pid, f"file://{blob_dir}",
                               *gc)

    workers = {"w0": worker("w0")}
    try:
        wait_output(kafka, output, producing.total)
        with server.client() as c:
            workers["w1"] = worker("w1")
            joined = time.monotonic()
            balanced: dict[str, Any] = {}
            while not balanced:  # produce while w1 warms up and takes over
                producing.send(50)
                time.sleep(0.5)
                model = c.get("/jobmodel").json()
                if len(actives(model, "w1")) == 4 and model["barrier"] == "done":
                    balanced = model
                assert time.monotonic() - joined < 180, model["containers"].keys()
            moved = actives(balanced, "w1")
            assert c.get("/status").json()["lastRebalance"]["reason"] == "probing"
            # the moved tasks started from the warmed-up copies, not from the blob store
            warm = restores_of(c, "w1", lambda r: set(moved) <= set(r))
            assert all(warm[t]["source"] in ("local", "partial") for t in moved), warm
            # and into a query already running: started with the warm-ups, it did not
            # start in the moved tasks' pause
            log = (tmp_path / "w1.log").read_text()
            assert 0 <= log.find(" started: kafka") < log.find(": starting "), log[-3000:]
            wait_output(kafka, output, producing.total)

            workers["w2"] = worker("w2")
            w2_started = time.monotonic()
            for _ in range(6):
                producing.send(100)
                time.sleep(1)
            # the versions since (w2's join, its warm-ups) kept tasks on w1: never
            # restored again, their store reloaded by nothing but their own batches
            model = c.get("/jobmodel").json()
            while "w2" not in model["containers"] or model["barrier"] != "done":
                assert time.monotonic() - w2_started < 240, model["containers"].keys()
                producing.send(20)
                time.sleep(0.5)
                model = c.get("/jobmodel").json()
            kept = sorted(set(moved) & set(actives(model, "w1")))
            assert kept, (moved, model["containers"].keys())
            assert {t: restores_of(c, "w1")[t]["count"] for t in kept} == dict.fromkeys(kept, 1)
            workers["w0"].send_signal(signal.SIGTERM)  # leaves gracefully
            for _ in range(4):
                producing.send(100)
                time.sleep(0.5)
            assert workers["w0"].wait(120) == 0
            wait_output(kafka, output, producing.total)
            w1_tasks = actives(c.get("/jobmodel").json(), "w1")
            for _ in range(4):  # the victim is mid-run when it dies
                producing.send(100)
                time.sleep(0.3)
            crash(workers["w1"])
            producing.send(300)
            wait_output(kafka, output, producing.total)
            taken = restores_of(c, "w2", lambda r: set(w1_tasks) <= set(r))
            assert any(taken[t]["source"] == "remote" for t in w1_tasks), taken
            time.sleep(8)  # beyond the grace period: a collection or two
            indexes = list((blob_dir / "indexes").rglob("*.json"))
            # one committed index per task, plus those younger than the grace period
            assert len(indexes) < 8 * 4, len(indexes)
    finally:
        stop_workers(list(workers.values()))
    check_counts(kafka, output, producing)


@pytest.mark.beside  # in the second process (tests/infra/beside.py)
@pytest.mark.parametrize("standbys", [0, 1])
def test_state_follows_the_elasticity_factor_while_the_job_runs(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path, standbys: int,
) -> None:
    """Scale 1 -> 2 -> 4 -> 8 -> 2 -> 1 while producing; a worker is killed -9 during the
    first split and one leaves gracefully during a merge. Every key's counter follows its
    key bucket through each split and merge: count == seq + 1 on every output record."""
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(600)
    server = coordinator_for(start_server, kafka, topic, "--partition-poll-interval-ms",
                             "1000", "--lease-ttl-ms", "6000", "--elasticity-factor", "1",
                             "--stateful", "--num-standbys", str(standbys))
    blobs = f"file://{tmp_path / 'blobs'}"

    def worker(pid: str) -> Any:  # w1 reads with Spark's Kafka connector
        return stateful_worker(tmp_path, server, kafka, output, pid, blobs,
                               *(["--kafka-reader", "jvm"] if pid == "w1" else []))

    workers = {pid: worker(pid) for pid in ("w0", "w1")}
    composed: dict[str, dict[str, Any]] = {}  # task -> its composed restore's figures

    def produce_while_scaling(c: httpx.Client, factor: int,
                              during: Callable[[], None] | None = None) -> None:
        assert c.post("/scale", json={"elasticityFactor": factor}).status_code == 202
        for i in range(5):
            producing.send(100)
            time.sleep(0.5)
            if i == 1 and during is not None:
                during()
        wait_output(kafka, output, producing.total)
        for p in c.get("/status").json()["processors"]:
            restores = (p.get("stats") or {}).get("stateRestores") or {}
            composed.update({t: r for t, r in restores.items() if r["source"] == "composed"})

    try:
        wait_output(kafka, output, producing.total)
        with server.client() as c:
            def kill_w1() -> None:
                crash(workers["w1"])
                workers["w1"] = worker("w1")  # back a moment later

            def w0_leaves() -> None:
                workers["w0"].send_signal(signal.SIGTERM)
                assert workers["w0"].wait(120) == 0
                workers["w0"] = worker("w0")

            produce_while_scaling(c, 2, kill_w1)
            produce_while_scaling(c, 4)
            produce_while_scaling(c, 8)
            produce_while_scaling(c, 2, w0_leaves)
            produce_while_scaling(c, 1)
            assert c.get("/scale").json()["elasticityFactor"] == 1
    finally:
        stop_workers(list(workers.values()))
    check_counts(kafka, output, producing)
    assert composed, "no task reported a composed restore"
    # splits link their parent, merges both children (the second as a part): no
    # composition copied an entry (every store here is bucket-ordered)
    assert all(r["copied"] == 0 for r in composed.values()), composed
    assert any(r["parts"] for r in composed.values()), composed
    for pid in ("w0", "w1"):  # one query per worker process (each started twice; the
        runs = queries_started(tmp_path, pid)  # second once it gets a task)
        assert runs[0] == 1 and all(n <= 1 for n in runs), (pid, runs)


@pytest.mark.beside  # in the second process (tests/infra/beside.py)
def test_a_restarted_worker_gets_its_tasks_back_once_its_standby_copies_catch_up(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    """Two workers, one standby per task: w1 is killed -9 and restarted on its host. w0
    runs every active meanwhile; w1 comes back holding standby copies, which are the
    warm-ups of the tasks the balanced assignment gives it back: event-driven probing
    moves them as soon as w1 reports them caught up, not at the 10-minute timer."""
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(600)
    server = coordinator_for(start_server, kafka, topic, "--partition-poll-interval-ms",
                             "1000", "--lease-ttl-ms", "6000", "--elasticity-factor", "2",
                             "--stateful", "--num-standbys", "1",
                             "--probing-interval-ms", "600000",
                             "--probing-min-interval-ms", "1000")
    blobs = f"file://{tmp_path / 'blobs'}"

    def worker(pid: str) -> Any:
        return stateful_worker(tmp_path, server, kafka, output, pid, blobs)

    workers = {pid: worker(pid) for pid in ("w0", "w1")}
    try:
        wait_output(kafka, output, producing.total)
        with server.client() as c:
            crash(workers["w1"])
            deadline = time.monotonic() + 120
            while len(actives(c.get("/jobmodel").json(), "w0")) != 4:
                producing.send(20)
                assert time.monotonic() < deadline, "w0 never took w1's tasks"
                time.sleep(0.5)
            workers["w1"] = worker("w1")
            caught_up_at: float | None = None
            while True:
                producing.send(20)
                model = c.get("/jobmodel").json()
                status = c.get("/status").json()
                # w1 says the copies it holds are caught up (a condition that lasts: the
                # probing rebalance may come before the next look, never before this)
                lags: dict[str, int] = next((p["taskLags"] for p in status["processors"]
                             if p["processorId"] == "w1"), {})
                if caught_up_at is None and len(lags) >= 2 and all(
                        lag <= status["acceptableRecoveryLag"] for lag in lags.values()):
                    caught_up_at = time.monotonic()
                if len(actives(model, "w1")) == 2 and model["barrier"] == "done":
                    back_at = time.monotonic()
                    break
                assert time.monotonic() < deadline + 120, (status["warmups"], lags,
                                                           status["probingRebalanceWanted"])
                time.sleep(0.3)
            reason = c.get("/status").json()["lastRebalance"]["reason"]
            assert reason == "probing", reason  # not a join, not the timer
            assert caught_up_at is not None
            # within seconds of catching up: the minimum probing interval (1 s), a sweep
            # and a debounce, not the 600 s timer; generous for a loaded machine
            assert back_at - caught_up_at < 30, back_at - caught_up_at
            wait_output(kafka, output, producing.total)
    finally:
        stop_workers(list(workers.values()))
    check_counts(kafka, output, producing)


@pytest.mark.beside  # in the second process (tests/infra/beside.py)
def test_repeated_sigterms_neither_cut_a_handover_short_nor_a_start(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    """A supervisor that repeats SIGTERM (every 0.1 s until the worker is gone): the
    worker still finishes its handover (last commit, leave) and exits 0; one started and
    signalled at once exits 0 without starting Spark's query. The next worker picks up
    exactly where the first stopped: every count exact."""
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(400)
    server = coordinator_for(start_server, kafka, topic, "--partition-poll-interval-ms",
                             "1000", "--elasticity-factor", "2", "--stateful")
    blobs = f"file://{tmp_path / 'blobs'}"
    early = stateful_worker(tmp_path, server, kafka, output, "w9", blobs)
    deadline = time.monotonic() + 120
    while "Spark's default log4j profile" not in (tmp_path / "w9.log").read_text():
        assert time.monotonic() < deadline and early.poll() is None  # Spark is starting
        time.sleep(0.05)
    early.send_signal(signal.SIGTERM)
    early.send_signal(signal.SIGTERM)
    assert early.wait(120) == 0, (tmp_path / "w9.log").read_text()[-3000:]
    assert "registered as" not in (tmp_path / "w9.log").read_text()
    w0 = stateful_worker(tmp_path, server, kafka, output, "w0", blobs)
    w1 = None
    try:
        wait_output(kafka, output, producing.total)
        producing.send(300)  # in flight when the signals come
        signals = 0
        while w0.poll() is None and signals < 600:
            w0.send_signal(signal.SIGTERM)
            signals += 1
            time.sleep(0.1)
        assert w0.wait(120) == 0, (tmp_path / "w0.log").read_text()[-4000:]
        log = (tmp_path / "w0.log").read_text()
        assert signals > 1 and "SIGTERMs received" in log, signals
        assert "w0 left the group" in log
        w1 = stateful_worker(tmp_path, server, kafka, output, "w1", blobs)
        wait_output(kafka, output, producing.total)
    finally:
        stop_workers([w for w in (w0, w1) if w is not None])
    check_counts(kafka, output, producing)


def test_a_stateful_worker_refuses_a_coordinator_without_stateful(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    """Without ``--stateful`` the coordinator names no ``stateSources`` and a factor
    change would start the new tasks with empty state, silently. The stateful worker
    refuses before any task runs: exit 1 with the reason, it left, nothing written and
    nothing committed."""
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(100)
    server = coordinator_for(start_server, kafka, topic, "--elasticity-factor", "2")
    w0 = stateful_worker(tmp_path, server, kafka, output, "w0", f"file://{tmp_path / 'b'}")
    try:
        rc = w0.wait(180)
    finally:
        stop_workers([w0])
    log = (tmp_path / "w0.log").read_text()
    assert rc == 1, log[-3000:]
    assert "refusing to run" in log and "Start the coordinator with --stateful" in log
    assert "w0 left the group" in log
    assert queries_started(tmp_path, "w0") == [0]  # no Spark query, no batch
    assert not re.search(r'POST \S+/checkpoints "', log)  # no commit
    with server.client() as c:
        assert c.get("/processors").json() == []
    assert read_all(kafka, output) == []
