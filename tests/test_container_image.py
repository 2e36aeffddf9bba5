"""The Dockerfile's two images, built and run as an operator without a registry or a Docker
engine would here.

A Debian base made by ``mmdebstrap`` is imported into ``podman`` under the name the
Dockerfile's ``FROM`` uses; both targets are built with ``podman build --isolation
chroot``; then, since ``podman run`` cannot start containers in this sandbox, each image's
root file system (a container created from it, mounted) runs under ``chroot`` as the
image's unprivileged user with the image's environment: the coordinator serves ``/healthz``
and passes its own HEALTHCHECK, and a worker from the worker image processes records from
Kafka with the job model of that coordinator, through the connector jars baked into it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.local.kafka import LocalKafka
from service.local.ports import free_port, stop_process_group, wait_until_answering
from tests.infra import background
from tests.infra.images import ImageBuild, remove_images
from tests.worker.test_end_to_end import Producing, new_topics, read_all

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
UID = "10001"
TOKENS = {"COXSWAIN_WORKER_TOKEN": "worker-token-for-the-image-test-0123456789",
          "COXSWAIN_ADMIN_TOKEN": "admin-token-for-the-image-test-0123456789"}


def podman(*args: str, timeout_s: float = 120) -> str:
    result = subprocess.run(["podman", *args], capture_output=True, text=True,
                            timeout=timeout_s, check=False)
    assert result.returncode == 0, f"podman {' '.join(args)}:\n{result.stderr[-3000:]}"
    return result.stdout.strip()


# built from the run's start, beside the fast tests (tests/infra/background.py)
IMAGES = ImageBuild().job()
BACKGROUND_JOBS = [IMAGES]


@pytest.fixture(scope="module")
def images(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    for tool in ("podman", "mmdebstrap", "chroot"):
        assert shutil.which(tool), f"{tool} is missing: ./deploy/setup.sh --dev installs it"
    try:
        yield background.result(request.config, IMAGES)
    finally:
        remove_images()


class RootFs:
    """A container created from an image (never started) with its root file system
    mounted: writable, as a container's would be."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.config: dict[str, Any] = json.loads(podman("image", "inspect", image))[0]
        self.container = podman("create", image)
        self.path = Path(podman("mount", self.container))
        self._binds: list[Path] = []
        # what a container runtime writes into every container (Spark resolves localhost)
        (self.path / "etc" / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")

    def bind(self, host: str) -> None:
        """Bind-mount a host folder (a JVM needs /proc) into the root file system."""
        target = self.path / host.lstrip("/")
        subprocess.run(["mount", "--bind", host, str(target)], check=True)
        self._binds.append(target)

    def env(self, **extra: str) -> list[str]:
        """The image's environment (ENV), then ``extra``, as NAME=VALUE."""
        env = dict(e.split("=", 1) for e in self.config["Config"]["Env"])
        env.update(HOME="/var/lib/coxswain", **extra)
        return [f"{k}={v}" for k, v in env.items()]

    def command(self, argv: list[str], **env: str) -> list[str]:
        """``argv`` run in the root file system as the image's user, in its WORKDIR,
        with its environment and nothing of ours (chroot, env exec: the pid is argv's)."""
        assert self.config["Config"]["User"] == "coxswain"
        return ["chroot", f"--userspec={UID}:{UID}", str(self.path), "/usr/bin/env", "-i",
                "-C", self.config["Config"]["WorkingDir"], *self.env(**env), *argv]

    def start(self, argv: list[str], log: Path, **env: str) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(self.command(argv, **env), stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)

    def close(self) -> None:
        for target in reversed(self._binds):
            subprocess.run(["umount", "--lazy", str(target)], check=False)
        subprocess.run(["podman", "umount", self.container], capture_output=True, check=False)
        subprocess.run(["podman", "rm", "--force", self.container], capture_output=True,
                       check=False)


@pytest.fixture
def coordinator_fs(images: dict[str, str]) -> Iterator[RootFs]:
    fs = RootFs(images["coordinator"])
    try:
        yield fs
    finally:
        fs.close()


@pytest.fixture
def worker_fs(images: dict[str, str]) -> Iterator[RootFs]:
    fs = RootFs(images["worker"])
    fs.bind("/proc")
    try:
        yield fs
    finally:
        fs.close()


def entrypoint(fs: RootFs, *args: str) -> list[str]:
    return [*fs.config["Config"]["Entrypoint"], *args]


def test_the_coordinator_image_serves_healthz_as_its_user_and_passes_its_healthcheck(
        coordinator_fs: RootFs, tmp_path: Path) -> None:
    fs = coordinator_fs
    config = fs.config["Config"]
    assert config["Cmd"] == ["serve"] and "8080/tcp" in config["ExposedPorts"]
    assert not (fs.path / "usr/bin/java").exists()  # no Java, no PySpark: a slim image
    assert not list(fs.path.glob("opt/coxswain/lib/python3*/site-packages/pyspark"))
    # listening on 0.0.0.0 (the image's COXSWAIN_HOST) without tokens is refused, clearly
    refused = subprocess.run(fs.command(entrypoint(fs, *config["Cmd"])), capture_output=True,
                             text=True, timeout=120, check=False)
    assert refused.returncode != 0 and "refusing to listen on 0.0.0.0" in refused.stderr

    port = free_port()
    server = fs.start(entrypoint(fs, *config["Cmd"], "--input", "kafka.orders:8"),
                      tmp_path / "coordinator.log", COXSWAIN_PORT=str(port), **TOKENS)
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_until_answering(f"{url}/healthz", server, 60), \
            (tmp_path / "coordinator.log").read_text()[-3000:]
        worker_auth = {"Authorization": f"Bearer {TOKENS['COXSWAIN_WORKER_TOKEN']}"}
        registered = httpx.post(f"{url}/processors", json={"locationId": "host-a"},
                                headers=worker_auth, timeout=10)
        assert registered.status_code in (200, 201), registered.text
        # the image's own HEALTHCHECK, run as Docker would (in the image, as its user)
        check = fs.config["Healthcheck"]["Test"]
        assert check[0] == "CMD" and "/healthz" in check[-1]
        healthy = subprocess.run(fs.command(check[1:], COXSWAIN_PORT=str(port)),
                                 capture_output=True, text=True, timeout=30, check=False)
        assert healthy.returncode == 0, healthy.stderr
        # its SQLite store is in the image's data dir, written by the unprivileged user
        db = fs.path / "var/lib/coxswain/data/coxswain.db"
        assert db.exists() and str(db.stat().st_uid) == UID
    finally:
        stop_process_group(server)
    log = (tmp_path / "coordinator.log").read_text()
    assert "Application shutdown complete" in log, log[-3000:]  # SIGTERM: a clean stop
    unhealthy = subprocess.run(fs.command(check[1:], COXSWAIN_PORT=str(port)),
                               capture_output=True, timeout=30, check=False)
    assert unhealthy.returncode != 0  # and the check fails once it is gone


def test_a_worker_from_the_worker_image_processes_records_of_the_coordinator_image(
        coordinator_fs: RootFs, worker_fs: RootFs, kafka: LocalKafka, tmp_path: Path) -> None:
    jars = sorted(p.name for p in worker_fs.path.glob("opt/coxswain/cache/spark-kafka/*/*.jar"))
    assert len(jars) == 4 and any(j.startswith("spark-sql-kafka") for j in jars), jars
    assert worker_fs.config["Healthcheck"]["Test"] == ["NONE"]
    # a job's code goes on the image's PYTHONPATH (/app), as the Dockerfile says
    shutil.copy(ROOT / "tests" / "worker" / "apps.py", worker_fs.path / "app" / "imagejob.py")

    topic, output = new_topics(kafka, 2)
    producing = Producing(kafka, topic)
    producing.send(300)
    port = free_port()
    server = coordinator_fs.start(
        entrypoint(coordinator_fs, "serve", "--kafka-bootstrap", kafka.bootstrap,
                   "--input", f"kafka.{topic}", "--elasticity-factor", "2",
                   "--debounce-ms", "300"),
        tmp_path / "coordinator.log", COXSWAIN_PORT=str(port), **TOKENS)
    worker = None
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_until_answering(f"{url}/healthz", server, 60)
        worker = worker_fs.start(
            entrypoint(worker_fs, "worker", "--coordinator", url, "--app",
                       "imagejob:echo_task", "--api", "task", "--output-topic", output,
                       "--kafka-bootstrap", kafka.bootstrap, "--processor-id", "w0",
                       "--location", "host-w0", "--spark-master", "local[1]"),
            tmp_path / "worker.log", SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOCAL_HOSTNAME="localhost", **TOKENS)
        deadline = time.monotonic() + 240
        while True:
            records = read_all(kafka, output)
            if len({(r["key"], r["seq"]) for r in records}) >= producing.total:
                break
            assert worker.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "worker.log").read_text()[-4000:]
            time.sleep(2)
        assert {r["task"] for r in records} == {f"Partition {p}_{b}_2"
                                                for p in range(2) for b in range(2)}
        assert {r["processor"] for r in records} == {"w0"}
    finally:
        stop_process_group(worker, grace_s=60)
        stop_process_group(server)
    assert worker is not None and worker.returncode == 0, \
        (tmp_path / "worker.log").read_text()[-3000:]
    # its Spark's Python processes imported the image's PySpark through the home the
    # build made (the cache is read-only at run time: a worker could not make it)
    homes = list(worker_fs.path.glob("opt/coxswain/cache/jvm/spark-home-*"))
    assert len(homes) == 1 and (homes[0] / "jars").is_symlink(), homes
    log = (tmp_path / "worker.log").read_text()
    assert "no Spark home could be made" not in log and "batch path warmed up" in log
