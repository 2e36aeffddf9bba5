"""A local S3 API server for tests and development: moto's standalone server (from
``moto[server]``, a dev dependency) on a loopback port, stopped by its pid."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from common.paths import cache_dir
from service.local.ports import free_port, stop_process, wait_started

# moto accepts any credentials; clients still need some to sign requests
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "coxswain-test", "AWS_SECRET_ACCESS_KEY": "coxswain-test",
               "AWS_REGION": "us-east-1"}


@dataclass
class LocalS3:
    """One moto server."""

    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def endpoint(self) -> str:
        """The server's URL."""
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def start(timeout_s: float = 30.0) -> LocalS3:
        """Start a server and wait until it answers."""
        binary = Path(sys.executable).with_name("moto_server")
        if not binary.exists():
            found = shutil.which("moto_server")
            if found is None:
                raise RuntimeError("moto_server not found: ./deploy/setup.sh --dev installs "
                                   "moto[server]")
            binary = Path(found)
        port = free_port()
        root = cache_dir() / "s3"
        root.mkdir(parents=True, exist_ok=True)
        log = root / f"moto-{port}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(port)],
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        server = LocalS3(port, proc, log)

        def answering() -> bool:
            try:
                httpx.get(server.endpoint, timeout=0.5)
                return True
            except httpx.HTTPError:
                return False

        wait_started(proc, answering, "moto_server", log, timeout_s, server.stop)
        return server

    def create_bucket(self, name: str) -> None:
        """Create a bucket (path-style, unsigned requests are fine for moto)."""
        r = httpx.put(f"{self.endpoint}/{name}", timeout=10)
        if r.status_code not in (200, 409):
            raise RuntimeError(f"bucket {name} not created: {r.status_code} {r.text}")

    def stop(self) -> None:
        """Stop the server by pid."""
        stop_process(self.proc)
