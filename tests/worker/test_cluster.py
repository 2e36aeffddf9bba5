"""Workers on a real Spark standalone cluster (a master and two Spark workers started by
the test, each with its own work folder): the app travels with the application, its rows
are processed by the executors, and an app the executors cannot import stops the worker
before it registers, instead of failing its first batch four times over."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from service.local.kafka import LocalKafka
from service.local.kinesis import CREDENTIALS as KINESIS_CREDENTIALS
from service.local.kinesis import LocalKinesis
from service.local.s3 import CREDENTIALS, LocalS3
from tests.infra.spark_cluster import (
    SLOW_START_PLUGIN,
    START_DELAY_ENV,
    SparkCluster,
    slow_start_plugin,
)
from tests.service.conftest import StartServer
from tests.service.test_kinesis_inputs import kinesis_client, wait_active
from tests.worker.test_end_to_end import (
    Producing,
    check_lost_and_order,
    coordinator_for,
    new_topics,
    read_all,
    stop_workers,
    wait_output,
)
from tests.worker.test_query_restart import kill_until_restarted

pytestmark = pytest.mark.slow

#: the Python processes a worker's driver starts on a cluster master: the planner of
#: its source (Spark's streaming source runner; through PySpark's daemon or not)
PLANNERS = ("python_streaming_source_runner", "pyspark.daemon")

#: an app whose module imports a helper from a folder of its own (not on the executors')
APP = """
import json
import os
import time

import pandas as pd

import probe_helper


def count(ctx, rows):  # with state: count == seq + 1 on every record when exact
    time.sleep(0.004 * len(rows))
    values = []
    for k, v in zip(rows["key"], rows["value"]):
        n = ctx.state.get(k, "count", 0) + 1
        ctx.state.set(k, "count", n)
        values.append(json.dumps({
            "key": k.decode(), "seq": int(v), "count": n, "task": ctx.task_name,
            "processor": ctx.processor_id, "version": ctx.version, "cwd": os.getcwd(),
            "tag": probe_helper.TAG}))
    return pd.DataFrame({"key": list(rows["key"]), "value": values})


def process(ctx, rows):
    time.sleep(0.004 * len(rows))  # 4 ms of work per record: batches take seconds
    return pd.DataFrame({"key": list(rows["key"]), "value": [
        json.dumps({"key": k.decode(), "seq": int(v), "task": ctx.task_name,
                    "processor": ctx.processor_id, "version": ctx.version,
                    "cwd": os.getcwd(), "tag": probe_helper.TAG})
        for k, v in zip(rows["key"], rows["value"])]})
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    started = SparkCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    try:
        yield started
    finally:
        started.stop()


def app_folders(tmp: Path) -> tuple[Path, Path]:
    """The app's folder (the worker's current directory) and its helper's."""
    app, helper = tmp / "app", tmp / "helper"
    app.mkdir()
    helper.mkdir()
    (app / "probe_app.py").write_text(textwrap.dedent(APP))
    (helper / "probe_helper.py").write_text('TAG = "helped"\n')
    return app, helper


def cluster_worker(tmp: Path, cluster: SparkCluster, url: str, kafka: LocalKafka,
                   output: str, pid: str, *extra: str, env: dict[str, str] | None = None,
                   app: str = "probe_app:process") -> subprocess.Popen[bytes]:
    """``coxswain worker`` (the installed command) started in the app's folder, its
    driver on loopback, one executor core of ``cluster``."""
    log = (tmp / f"{pid}.log").open("ab")
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "coxswain"), "worker", "--coordinator", url,
         "--app", app, "--api", "task", "--output-topic", output,
         "--kafka-bootstrap", kafka.bootstrap, "--processor-id", pid,
         "--target-batch-ms", "4000", "--max-offsets-per-trigger", "100000",
         "--spark-master", cluster.master_url,
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=512m",
         "--conf", "spark.cores.max=1", *extra],
        cwd=tmp / "app", stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**environment, **(env or {})})


@pytest.mark.parametrize("stateful", [False, True], ids=["stateless", "stateful"])
def test_two_workers_on_a_cluster_rescale_and_lose_and_gain_an_executor_losing_nothing(
    start_server: StartServer, kafka: LocalKafka, cluster: SparkCluster,
    s3_server: LocalS3, tmp_path: Path, stateful: bool,
) -> None:
    """Two Coxswain workers, each its own cluster application with one executor core,
    saturated (4 ms per record, 4 s batches); the app ships itself and its helper
    (--py-files); a rescale 1 -> 4 -> 1 while producing, the first change mid-batch (cut
    short through the driver's HTTP signal), with a Spark worker killed -9 (one
    application loses its only executor) and another added meanwhile. Stateless: first,
    w0's source planner (a Python process of its driver) killed: its query starts again
    in the same process, lease kept. Stateful: the
    counting app, its state kept by the executors (each Spark worker's folder private)
    and backed up to an S3 API server; every count exact."""
    _, helper = app_folders(tmp_path)
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(1500)
    server = coordinator_for(start_server, kafka, topic,
                             *(["--stateful"] if stateful else []))
    state: list[str] = []
    if stateful:
        bucket = f"b-{uuid.uuid4().hex[:10]}"
        s3_server.create_bucket(bucket)
        state = ["--stateful", "--blob-store", f"s3://{bucket}/cluster",
                 "--blob-store-endpoint", s3_server.endpoint,
                 *(a for k, v in CREDENTIALS.items()
                   for a in ("--conf", f"spark.executorEnv.{k}={v}"))]

    def start(pid: str) -> subprocess.Popen[bytes]:
        return cluster_worker(tmp_path, cluster, server.url, kafka, output, pid,
                              "--py-files", str(helper / "probe_helper.py"),
                              "--state-dir", str(tmp_path / f"driver-state-{pid}"), *state,
                              app="probe_app:count" if stateful else "probe_app:process")

    workers = {"w0": start("w0")}
    victim = cluster.alive()[0]
    try:
        with server.client() as c:
            deadline = time.monotonic() + 240
            while len(read_all(kafka, output)) < 300:  # mid-backlog: w0 in a batch
                assert workers["w0"].poll() is None
                assert time.monotonic() < deadline, "w0 processes nothing"
                time.sleep(0.5)
            first = c.get("/jobmodel").json()["version"]
            if not stateful:
                # an infrastructure fault on w0's driver: the source's Python planner
                # killed; its query starts again in the same process, lease kept
                kill_until_restarted(workers["w0"], tmp_path / "w0.log", producing,
                                     names=PLANNERS)
            workers["w1"] = start("w1")  # joins: stateful, through warm-ups
            deadline = time.monotonic() + 240
            while not any(r["processor"] == "w1" for r in read_all(kafka, output)):
                assert all(w.poll() is None for w in workers.values())
                assert time.monotonic() < deadline, "w1 never ran a task"
                producing.send(50)
                time.sleep(1)
            joined = restores_of(c, "w1") if stateful else {}
            wait_output(kafka, output, producing.total)
            # a backlog of seconds for both, and the change while they are in a batch
            mark = len(read_all(kafka, output))
            producing.send(2000)
            deadline = time.monotonic() + 240
            while len(read_all(kafka, output)) < mark + 200:
                assert time.monotonic() < deadline, "the burst is not processed"
                time.sleep(0.3)
            assert c.post("/scale", json={"elasticityFactor": 4}).status_code == 202
            for _ in range(4):
                producing.send(100)
                time.sleep(0.5)
            cluster.kill_worker(victim)  # a host lost, mid-run: an application's executor
            for _ in range(4):
                producing.send(100)
                time.sleep(0.5)
            added = cluster.add_worker()  # its application gets an executor there
            wait_output(kafka, output, producing.total)
            assert c.post("/scale", json={"elasticityFactor": 1}).status_code == 202
            for _ in range(4):
                producing.send(100)
                time.sleep(0.5)
            wait_output(kafka, output, producing.total)
    finally:
        stop_workers(list(workers.values()))
    for pid, worker in workers.items():
        assert worker.returncode == 0, (tmp_path / f"{pid}.log").read_text()[-3000:]
    records = read_all(kafka, output)
    duplicated = check_lost_and_order(records, producing)
    # duplicates only of what the lost executor had processed (its tasks run again), and
    # stateless, of w0's batch in flight when its planner was killed (redone)
    lost = str(cluster.work_dir(victim))
    assert all(d["cwd"].startswith(lost) or (
        not stateful and d["processor"] == "w0" and d["version"] == first)
        for d in duplicated), duplicated[:3]
    if not stateful:
        w0 = (tmp_path / "w0.log").read_text()
        assert w0.count("registered as w0") == 1, w0[-3000:]  # the restart kept its lease
        assert "the query died, not in the app's code" in w0
    if stateful:
        wrong = [r for r in records if r["count"] != r["seq"] + 1]
        assert not wrong, wrong[:5]  # exact state, duplicates included
        # w1's tasks moved once caught up: their state came from the copy its executor
        # fetched as a warm-up (a refresh job), at most the last commits' files fetched
        assert {r["source"] for r in joined.values()} <= {"local", "partial"}, joined
        # kept where the tasks ran: in the executors' folders, none on the drivers'
        held = [p for d in cluster.work_dirs() for p in Path(d).rglob("live.base")]
        assert held, "no task state in the executors' folders"
        assert not any((tmp_path / f"driver-state-{pid}").exists() for pid in workers)
    assert {r["tag"] for r in records} == {"helped"}
    assert {r["processor"] for r in records} == {"w0", "w1"}
    assert len({r["version"] for r in records}) >= 3  # factors 1, 4 and 1 again
    # run by the executors, in the Spark workers' folders, never by the drivers
    outside = [r["cwd"] for r in records if not r["cwd"].startswith(cluster.work_dirs())]
    assert not outside, outside[:3]
    assert any(r["cwd"].startswith(str(cluster.work_dir(added))) for r in records)
    logs = [(tmp_path / f"{pid}.log").read_text() for pid in workers]
    for log in logs:
        assert "shipped to the executors: probe_app.py, probe_helper.py" in log
        assert "cannot read the driver's cut signals" not in log
    assert any("cut short" in log for log in logs)  # the executors read the HTTP signal
    print(f"{len(records)} records, {len(duplicated)} duplicates")
    with server.client() as c:  # both left
        assert c.get("/processors").json() == []


def restores_of(c: Any, pid: str) -> dict[str, Any]:
    """Processor ``pid``'s restores (task -> how its state came), once its heartbeats
    name some."""
    deadline = time.monotonic() + 60
    while True:
        stats = {p["processorId"]: p.get("stats") or {}
                 for p in c.get("/status").json()["processors"]}
        restores = stats.get(pid, {}).get("stateRestores")
        if restores:
            return dict(restores)
        assert time.monotonic() < deadline, stats
        time.sleep(0.5)


def test_an_app_the_executors_cannot_import_stops_the_worker_before_it_registers(
    start_server: StartServer, kafka: LocalKafka, cluster: SparkCluster, tmp_path: Path
) -> None:
    _, helper = app_folders(tmp_path)
    topic, output = new_topics(kafka, 1)
    server = coordinator_for(start_server, kafka, topic)
    # the driver finds the helper on its PYTHONPATH; nothing ships it to the executors
    worker = cluster_worker(tmp_path, cluster, server.url, kafka, output, "w0",
                            env={"PYTHONPATH": str(helper)})
    started = time.monotonic()
    try:
        rc = worker.wait(180)
    finally:
        stop_workers([worker])
    log = (tmp_path / "w0.log").read_text()
    assert rc == 1, log[-3000:]
    assert "cannot be imported on the executors" in log, log[-3000:]
    assert "No module named 'probe_helper'" in log
    assert "--py-files" in log
    assert "failed 4 times" not in log  # one attempt, not Spark's retries
    with server.client() as c:  # it never registered: no lease left to expire
        assert c.get("/processors").json() == []
    print(f"the worker exited {time.monotonic() - started:.1f}s after its start")


def test_a_stateful_kinesis_job_on_a_cluster_is_refused_when_its_tasks_arrive(
    start_server: StartServer, kafka: LocalKafka, kinesis: LocalKinesis, s3_server: LocalS3,
    cluster: SparkCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Executor-kept state measures standby lags in offsets; Kinesis lags are
    milliseconds. Until the pairing is built, the worker refuses it with a clear
    message instead of judging warm-ups wrongly: it leaves (no lease left behind) and
    exits 1, having run nothing."""
    for name, value in KINESIS_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    _, helper = app_folders(tmp_path)
    client = kinesis_client(kinesis)
    stream = f"refused-{uuid.uuid4().hex[:8]}"
    client.create_stream(StreamName=stream, ShardCount=1)
    wait_active(client, stream)
    _, output = new_topics(kafka, 1)
    bucket = f"b-{uuid.uuid4().hex[:10]}"
    s3_server.create_bucket(bucket)
    server = start_server("--input", f"kinesis.{stream}", "--kinesis-endpoint",
                          kinesis.endpoint, "--stateful", "--debounce-ms", "300")
    worker = cluster_worker(
        tmp_path, cluster, server.url, kafka, output, "w0", "--stateful",
        "--kinesis-endpoint", kinesis.endpoint, "--py-files", str(helper / "probe_helper.py"),
        "--blob-store", f"s3://{bucket}/refused", "--blob-store-endpoint", s3_server.endpoint,
        app="probe_app:count")
    try:
        rc = worker.wait(180)
    finally:
        stop_workers([worker])
    log = (tmp_path / "w0.log").read_text()
    assert rc == 1, log[-3000:]
    assert "a stateful job on Kinesis runs on a local Spark master only" in log, log[-3000:]
    with server.client() as c:  # it left: its tasks are free at once, no lease to expire
        assert c.get("/processors").json() == []


def test_each_task_stays_on_one_of_two_executors_until_that_one_is_lost(
    start_server: StartServer, kafka: LocalKafka, cluster: SparkCluster,
    s3_server: LocalS3, tmp_path: Path,
) -> None:
    """One Coxswain worker whose application has two executors (one core each, on two
    Spark workers with private folders), the counting app at factor 4 on 2 partitions
    (8 tasks): each task's batches run on one executor, which keeps its state (restored
    once, then kept batch after batch). The Spark worker under one executor killed -9:
    its tasks restore once on the survivor and stay there. One added, whose executor is
    slow to start (its block manager registers seconds before it takes tasks, as while it
    fetches the application's jars on a busy host; once, the placement RDD made then was
    cached on the survivor alone and the new executor stayed idle for good): the
    application gets an executor there and tasks spread onto it. Every count exact."""
    _, helper = app_folders(tmp_path)
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(400)
    server = coordinator_for(start_server, kafka, topic, "--stateful",
                             "--elasticity-factor", "4")
    bucket = f"b-{uuid.uuid4().hex[:10]}"
    s3_server.create_bucket(bucket)
    plugin = slow_start_plugin(tmp_path / "plugin")
    worker = cluster_worker(
        tmp_path, cluster, server.url, kafka, output, "w0", "--py-files",
        str(helper / "probe_helper.py"), "--stateful", "--blob-store", f"s3://{bucket}/pin",
        "--blob-store-endpoint", s3_server.endpoint, "--target-batch-ms", "2000",
        "--conf", "spark.cores.max=2", "--conf", "spark.executor.cores=1",
        "--conf", f"spark.plugins={SLOW_START_PLUGIN}",
        "--conf", f"spark.driver.extraClassPath={plugin}",
        "--conf", f"spark.executor.extraClassPath={plugin}",
        *(a for k, v in CREDENTIALS.items() for a in ("--conf", f"spark.executorEnv.{k}={v}")),
        app="probe_app:count")
    tasks = {f"Partition {p}_{b}_4" for p in range(2) for b in range(4)}

    def rounds(n: int) -> list[dict[str, Any]]:
        """``n`` rounds of records, each waited for; the records output meanwhile."""
        mark = len(read_all(kafka, output))
        for _ in range(n):
            producing.send(300)
            wait_output(kafka, output, producing.total)
            assert worker.poll() is None
        return read_all(kafka, output)[mark:]

    def executors_of(records: list[dict[str, Any]]) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for r in records:
            found.setdefault(r["task"], set()).add(r["cwd"])
        return found

    try:
        deadline = time.monotonic() + 240
        while {r["task"] for r in read_all(kafka, output)} != tasks:
            assert worker.poll() is None, (tmp_path / "w0.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "not every task ran"
            time.sleep(1)
        while not any(a.get("cores") == 2 for a in cluster.state().get("activeapps", [])):
            assert time.monotonic() < deadline, "the application never had two executors"
            time.sleep(0.5)
        rounds(1)  # (an executor registered after the first batches: tasks spread now)
        with server.client() as c:
            before = {t: r["count"] for t, r in restores_of(c, "w0").items()}
            steady = executors_of(rounds(2))
            assert set(steady) == tasks
            assert all(len(cwds) == 1 for cwds in steady.values()), steady  # pinned
            held = {next(iter(cwds)) for cwds in steady.values()}
            assert len(held) == 2, steady  # on both executors
            # each task's state kept where it is, batch after batch: no restore since
            assert {t: r["count"] for t, r in restores_of(c, "w0").items()} == before
            # where each task's state is, for the leader's task localities (no
            # --location: the executors' hosts, this machine's here)
            stats = {p["processorId"]: p.get("stats") or {}
                     for p in c.get("/status").json()["processors"]}
            assert stats["w0"]["taskHosts"] == dict.fromkeys(tasks, socket.gethostname())
        victim = next(i for i in cluster.alive()
                      if any(cwd.startswith(str(cluster.work_dir(i))) for cwd in held))
        lost = str(cluster.work_dir(victim))
        cluster.kill_worker(victim)
        rounds(1)  # the lost executor's tasks restore on the survivor
        after = executors_of(rounds(1))
        assert all(len(cwds) == 1 and not next(iter(cwds)).startswith(lost)
                   for cwds in after.values()), after
        placements = (tmp_path / "w0.log").read_text().count("placement RDD")
        # the application gets an executor there, 8 s between its block manager's
        # registration and its first task
        added = cluster.add_worker(env={START_DELAY_ENV: "8"})
        deadline = time.monotonic() + 120
        while (tmp_path / "w0.log").read_text().count("placement RDD") == placements:
            assert time.monotonic() < deadline, "no placement RDD for the added executor"
            rounds(1)  # (the batch after the executor registers makes it)
        deadline = time.monotonic() + 120
        while not any(next(iter(cwds)).startswith(str(cluster.work_dir(added)))
                      for cwds in executors_of(rounds(1)).values()):
            # the placement made while it did not take tasks left it idle: made again
            assert time.monotonic() < deadline, "the added executor never ran a task"
        assert "got no slot (it was not taking tasks yet)" in (tmp_path / "w0.log").read_text()
        spread = executors_of(rounds(1))
        assert all(len(cwds) == 1 for cwds in spread.values()), spread
        assert any(next(iter(cwds)).startswith(str(cluster.work_dir(added)))
                   for cwds in spread.values()), spread
    finally:
        stop_workers([worker])
    log = (tmp_path / "w0.log").read_text()
    assert worker.returncode == 0, log[-3000:]
    records = read_all(kafka, output)
    duplicated = check_lost_and_order(records, producing)
    assert all(d["cwd"].startswith(lost) for d in duplicated), duplicated[:3]
    wrong = [r for r in records if r["count"] != r["seq"] + 1]
    assert not wrong, wrong[:5]
