"""A local S3 API server for tests and development: moto's standalone server (from
``moto[server]``, a dev dependency) on a loopback port, stopped by its pid."""

from __future__ import annotations

import json
import os
import shutil
import socket
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


#: requests moto serves before it enforces authentication (``enforce_auth``): the IAM
#: user, its access key and its policy (its readiness is then probed without a request)
_SETUP_REQUESTS = 3
_MEMORY_OBJECT_BYTES = 64 * 1024  # larger objects are spooled to disk (below)


@dataclass
class LocalS3:
    """One moto server."""

    port: int
    proc: subprocess.Popen[bytes]
    log: Path
    # with ``enforce_auth``: the only access key it accepts (id, secret)
    access_key: tuple[str, str] | None = None

    @property
    def endpoint(self) -> str:
        """The server's URL."""
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def start(timeout_s: float = 30.0, enforce_auth: bool = False) -> LocalS3:
        """Start a server and wait until it answers. ``enforce_auth``: every request
        must be signed with :attr:`access_key` (an IAM user moto checks, allowed s3:*),
        as a real S3 wants; otherwise moto accepts any credentials."""
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
            env = dict(os.environ)
            # moto keeps an object in memory up to this size and spools a larger one to
            # a temporary file (unlinked at once: gone with the process). Its default,
            # 5 MB, keeps every SST file of a task store in memory (4 MB at most), and a
            # bench writing GBs of state uploads several times that within the collector's
            # grace period: the server was killed for memory at 4 GB of state
            env.setdefault("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(_MEMORY_OBJECT_BYTES))
            if enforce_auth:
                env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(_SETUP_REQUESTS)
            proc = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(port)],
                                    stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env)
        server = LocalS3(port, proc, log)

        def answering() -> bool:
            if enforce_auth:  # a request would count against the unauthenticated ones
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    return True
                except OSError:
                    return False
            try:
                httpx.get(server.endpoint, timeout=0.5)
                return True
            except httpx.HTTPError:
                return False

        wait_started(proc, answering, "moto_server", log, timeout_s, server.stop)
        if enforce_auth:
            try:
                server.access_key = server._iam_user()
            except BaseException:
                server.stop()
                raise
        return server

    def _iam_user(self) -> tuple[str, str]:
        """An IAM user allowed s3:* and its access key, made in the requests moto
        serves unauthenticated (boto3, a dev dependency)."""
        import boto3  # noqa: PLC0415

        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name="us-east-1",
                           aws_access_key_id="setup", aws_secret_access_key="setup")
        iam.create_user(UserName="coxswain")
        key = iam.create_access_key(UserName="coxswain")["AccessKey"]
        iam.put_user_policy(UserName="coxswain", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        return key["AccessKeyId"], key["SecretAccessKey"]

    def create_bucket(self, name: str) -> None:
        """Create a bucket (path-style, unsigned requests are fine for moto)."""
        r = httpx.put(f"{self.endpoint}/{name}", timeout=10)
        if r.status_code not in (200, 409):
            raise RuntimeError(f"bucket {name} not created: {r.status_code} {r.text}")

    def stop(self) -> None:
        """Stop the server by pid."""
        stop_process(self.proc)
