"""Workers on a real Spark standalone cluster (a master and two Spark workers started by
the test, each with its own work folder): the app travels with the application, its rows
are processed by the executors, and an app the executors cannot import stops the worker
before it registers, instead of failing its first batch four times over."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.local.kafka import LocalKafka
from tests.infra.spark_cluster import SparkCluster
from tests.service.conftest import StartServer
from tests.worker.test_end_to_end import (
    Producing,
    coordinator_for,
    new_topics,
    read_all,
    stop_workers,
    wait_output,
)

pytestmark = pytest.mark.slow

#: an app whose module imports a helper from a folder of its own (not on the executors')
APP = """
import json
import os

import pandas as pd

import probe_helper


def process(ctx, rows):
    return pd.DataFrame({"key": list(rows["key"]), "value": [
        json.dumps({"key": k.decode(), "seq": int(v), "task": ctx.task_name,
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
                   output: str, *extra: str, env: dict[str, str] | None = None
                   ) -> subprocess.Popen[bytes]:
    """``coxswain worker`` (the installed command) started in the app's folder, its
    driver on loopback, its executors from ``cluster``."""
    log = (tmp / "worker.log").open("ab")
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "coxswain"), "worker", "--coordinator", url,
         "--app", "probe_app:process", "--api", "task", "--output-topic", output,
         "--kafka-bootstrap", kafka.bootstrap, "--processor-id", "w0",
         "--spark-master", cluster.master_url, "--conf", "spark.driver.host=127.0.0.1",
         "--conf", "spark.executor.memory=512m", *extra],
        cwd=tmp / "app", stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**environment, **(env or {})})


def test_the_app_and_its_py_files_reach_the_executors_which_process_every_record(
    start_server: StartServer, kafka: LocalKafka, cluster: SparkCluster, tmp_path: Path
) -> None:
    _, helper = app_folders(tmp_path)
    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(600)
    server = coordinator_for(start_server, kafka, topic, "--elasticity-factor", "2")
    worker = cluster_worker(tmp_path, cluster, server.url, kafka, output,
                            "--py-files", str(helper / "probe_helper.py"))
    try:
        wait_output(kafka, output, producing.total)
        producing.send(300)  # and batches after the first
        wait_output(kafka, output, producing.total)
    finally:
        stop_workers([worker])
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]
    records = read_all(kafka, output)
    per_key: dict[str, list[int]] = defaultdict(list)
    for r in records:
        per_key[r["key"]].append(r["seq"])
    assert per_key == {k: list(range(n)) for k, n in producing.seq.items()}
    assert {r["tag"] for r in records} == {"helped"}
    # run by the executors, in the Spark workers' folders, not by the driver
    work_dirs = [str(cluster.work_dir(i)) for i in range(cluster.workers)]
    outside = [r["cwd"] for r in records if not r["cwd"].startswith(tuple(work_dirs))]
    assert not outside, outside[:3]
    log = (tmp_path / "worker.log").read_text()
    assert "shipped to the executors: probe_app.py, probe_helper.py" in log
    with server.client() as c:  # it left
        assert c.get("/processors").json() == []


def test_an_app_the_executors_cannot_import_stops_the_worker_before_it_registers(
    start_server: StartServer, kafka: LocalKafka, cluster: SparkCluster, tmp_path: Path
) -> None:
    _, helper = app_folders(tmp_path)
    topic, output = new_topics(kafka, 1)
    server = coordinator_for(start_server, kafka, topic)
    # the driver finds the helper on its PYTHONPATH; nothing ships it to the executors
    worker = cluster_worker(tmp_path, cluster, server.url, kafka, output,
                            env={"PYTHONPATH": str(helper)})
    started = time.monotonic()
    try:
        rc = worker.wait(180)
    finally:
        stop_workers([worker])
    log = (tmp_path / "worker.log").read_text()
    assert rc == 1, log[-3000:]
    assert "cannot be imported on the executors" in log, log[-3000:]
    assert "No module named 'probe_helper'" in log
    assert "--py-files" in log
    assert "failed 4 times" not in log  # one attempt, not Spark's retries
    with server.client() as c:  # it never registered: no lease left to expire
        assert c.get("/processors").json() == []
    print(f"the worker exited {time.monotonic() - started:.1f}s after its start")
