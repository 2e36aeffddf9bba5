"""A Spark standalone cluster on this machine, from the PyPI pyspark: one master and
Spark workers started with its ``bin/spark-class``, each Spark worker with a work folder
of its own (executors' files and Python workers' current directories live there, as on
hosts of their own). Every daemon leads its own process group and is stopped by pid with
the executors it started."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pyspark

from service.local.ports import free_ports, stop_process_group

SPARK_HOME = Path(pyspark.__file__).parent
#: the class of :func:`slow_start_plugin`'s jar, for ``spark.plugins``
SLOW_START_PLUGIN = "coxswain.test.SlowExecutorStart"
#: a Spark worker started with this variable (seconds) launches executors that sleep that
#: long between their block manager's registration and taking tasks
START_DELAY_ENV = "COXSWAIN_TEST_EXECUTOR_START_DELAY_S"


def slow_start_plugin(folder: Path) -> Path:
    """The jar of ``tests/infra/java/SlowExecutorStart.java``, compiled into ``folder``
    against PySpark's jars (a JDK's javac and jar)."""
    source = Path(__file__).parent / "java" / "SlowExecutorStart.java"
    classes = folder / "classes"
    classes.mkdir(parents=True, exist_ok=True)
    javac, jar = shutil.which("javac"), shutil.which("jar")
    assert javac and jar, "a JDK's javac and jar are needed"
    subprocess.run([javac, "-nowarn", "-cp", str(SPARK_HOME / "jars" / "*"), "-d", str(classes),
                    str(source)], check=True, capture_output=True)
    built = folder / "slow-executor-start.jar"
    subprocess.run([jar, "cf", str(built), "-C", str(classes), "."], check=True,
                   capture_output=True)
    return built


@dataclass
class SparkCluster:
    """``workers`` Spark workers of ``cores`` cores each under ``root``."""

    root: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)  # pids the test killed
    port: int = 0
    ui_port: int = 0

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def work_dir(self, index: int) -> Path:
        return self.root / f"spark-worker-{index}"

    def start(self, timeout_s: float = 120) -> SparkCluster:
        self.port, self.ui_port, *worker_ui = free_ports(2 + self.workers)
        self.procs.append(self._daemon("master", [
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(self.port), "--webui-port", str(self.ui_port)]))
        self._wait(lambda state: True, "the master", timeout_s)
        for i in range(self.workers):
            self.add_worker(worker_ui[i], timeout_s)
        return self

    def add_worker(self, ui_port: int | None = None, timeout_s: float = 120,
                   env: dict[str, str] | None = None) -> int:
        """One more Spark worker (``env`` added to its environment, and so to its
        executors'); its index."""
        index = len(self.procs) - 1
        alive = self.alive_workers(self.state())
        work = self.work_dir(index)
        work.mkdir(parents=True, exist_ok=True)
        self.procs.append(self._daemon(f"worker-{index}", [
            "org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
            "--cores", str(self.cores), "--memory", self.memory,
            "--webui-port", str(ui_port or free_ports(1)[0]), "--work-dir", str(work)], env))
        self._wait(lambda state: self.alive_workers(state) > alive,
                   f"Spark worker {index}", timeout_s)
        return index

    def alive(self) -> list[int]:
        """Indexes of the Spark workers started and not killed, oldest first."""
        return [i for i, proc in enumerate(self.procs[1:]) if proc.pid not in self.killed]

    def work_dirs(self) -> tuple[str, ...]:
        """Every Spark worker's work folder so far."""
        return tuple(str(self.work_dir(i)) for i in range(len(self.procs) - 1))

    def kill_worker(self, index: int) -> None:
        """kill -9 of Spark worker ``index`` and its executors (a host lost)."""
        proc = self.procs[index + 1]
        self.killed.add(proc.pid)
        stop_process_group(proc, sig=9, grace_s=10)

    def state(self) -> dict[str, Any]:
        """The master's view (its web UI's JSON)."""
        return dict(httpx.get(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5).json())

    @staticmethod
    def alive_workers(state: dict[str, Any]) -> int:
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def stop(self) -> None:
        for proc in reversed(self.procs):  # workers (and their executors) first
            stop_process_group(proc, grace_s=20)
        self.procs.clear()

    def _daemon(self, name: str, args: list[str], extra: dict[str, str] | None = None
                ) -> subprocess.Popen[bytes]:
        log = (self.root / f"{name}.log").open("ab")
        # no PYTHONPATH: executors see what a host of their own would, and what ships
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_DAEMON_MEMORY="256m", SPARK_LOG_DIR=str(self.root),
                   SPARK_NO_DAEMONIZE="1")
        env.update(extra or {})
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args],
                                stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)

    def _wait(self, ready: Callable[[dict[str, Any]], bool], what: str, timeout_s: float
              ) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            dead = [p for p in self.procs if p.pid not in self.killed and p.poll() is not None]
            if dead:
                raise RuntimeError(f"{what} exited (rc {dead[0].returncode}); logs under "
                                   f"{self.root}")
            try:
                if ready(self.state()):
                    return
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready in {timeout_s:.0f}s; logs under "
                                   f"{self.root}")
            time.sleep(0.2)
