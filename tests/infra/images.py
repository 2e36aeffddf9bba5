"""The Dockerfile's two images, built as a background job (``tests/infra/background.py``).

Building them takes about two minutes of mostly one core (``podman build`` of both
targets; a Debian base made by ``mmdebstrap`` once): started with the run, beside the
fast tests, it is done when ``tests/test_container_image.py`` needs the images.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from common.paths import cache_dir
from tests.infra.background import Job, Runner

ROOT = Path(__file__).resolve().parents[2]
BASE = "localhost/debian:bookworm-slim"  # what FROM debian:bookworm-slim finds locally
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
PIP_CACHE = Path.home() / ".cache" / "pip"
TAGS = {target: f"localhost/coxswain-{target}:test" for target in ("coordinator", "worker")}


class BuildFailed(RuntimeError):
    """A step of the build failed; the message has the step and its stderr's end."""


class ImageBuild:
    """Both targets, one after the other, and what an interrupted build leaves behind."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self._dangling_before: set[str] = set()
        self._containers_before: set[str] = set()

    def job(self) -> Job:
        return Job("container images", self.build, self.discard)

    def build(self, runner: Runner) -> dict[str, str]:
        self._dangling_before = set(dangling())
        self._containers_before = set(containers())
        self._base_image(runner)
        for target, tag in TAGS.items():
            # docker format: an OCI image config has no HEALTHCHECK; no layer cache: the
            # build leaves only the tagged image behind (about 2 GB of stages otherwise)
            _check(runner, ["podman", "build", "--isolation", "chroot", "--pull=never",
                            "--format", "docker", "--layers=false", "--target", target,
                            "-t", tag, *_mounts(), str(self.root)], timeout_s=1800)
        return dict(TAGS)

    def discard(self, interrupted: bool) -> None:
        """Remove the images; after a build stopped midway also its working containers
        and finished stages (untagged images), the ones made since it started."""
        if interrupted:
            for container in set(containers()) - self._containers_before:
                _podman("rm", "--force", container)
            for image in set(dangling()) - self._dangling_before:
                _podman("rmi", "--force", image)
        remove_images()

    def _base_image(self, runner: Runner) -> None:
        """The Debian base, made once (the tar is cached under the git-ignored .cache/)."""
        if _podman("image", "exists", BASE).returncode == 0:
            return
        tar = cache_dir() / "container" / "debian-bookworm-minbase.tar"
        if not tar.exists():
            tar.parent.mkdir(parents=True, exist_ok=True)
            part = tar.with_suffix(".part.tar")
            _check(runner, ["mmdebstrap", "--variant=minbase", "--quiet", "bookworm",
                            str(part)], timeout_s=900)
            part.replace(tar)
        _check(runner, ["podman", "import", str(tar), BASE], timeout_s=300)


def _mounts() -> list[str]:
    ca = ["--build-arg", "CA_BUNDLE=/run/host-ca.crt",
          "-v", f"{HOST_CA}:/run/host-ca.crt:ro"] if HOST_CA.exists() else []
    # pip's cache from this machine's own install (./deploy/setup.sh): PySpark's wheel,
    # built from its 300 MB source there, is used as it is instead of downloaded and
    # built again. A mount: nothing of it goes into the image
    cache = ["-v", f"{PIP_CACHE}:/root/.cache/pip"] if PIP_CACHE.is_dir() else []
    return ca + cache


def _check(runner: Runner, argv: list[str], timeout_s: float) -> None:
    done = runner.run(argv, timeout_s)
    if done.returncode != 0:
        raise BuildFailed(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=False)


def remove_images() -> None:
    for tag in TAGS.values():  # a tag never made: nothing to remove
        _podman("rmi", "--force", tag)


def dangling() -> list[str]:
    """The ids of the untagged images (a stopped build's stages among them)."""
    return _podman("images", "--quiet", "--filter", "dangling=true").stdout.split()


def containers() -> list[str]:
    """The ids of every container, a build's working containers included."""
    return _podman("ps", "--all", "--external", "--quiet").stdout.split()
