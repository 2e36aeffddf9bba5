"""A local Kinesis API server for tests and development: kinesalite (from npm, run by the
machine's Node) on a loopback port, stopped by its pid.

kinesalite rather than moto's Kinesis: after a SplitShard or MergeShards it routes new
records to the child shards and ends a drained parent (GetRecords answers no
NextShardIterator), as Kinesis does; moto keeps writing to the closed parent and never
ends it, which is exactly the behaviour resharding must be tested against.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.paths import cache_dir
from service.local.ports import free_port, stop_process, wait_started

VERSION = "3.3.3"
# kinesalite accepts any credentials; clients still need some to sign requests
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "coxswain-test", "AWS_SECRET_ACCESS_KEY": "coxswain-test",
               "AWS_REGION": "us-east-1"}

# kinesalite's CLI listens on every interface; its module takes a host. Resharding and
# stream creation take effect at once (a real stream is ACTIVE within seconds).
_SERVER_JS = """\
const kinesalite = require('kinesalite');
const port = parseInt(process.argv[2], 10);
kinesalite({createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 100})
  .listen(port, '127.0.0.1', (err) => {
    if (err) { console.error(err); process.exit(1); }
    console.log('kinesalite listening on 127.0.0.1:' + port);
  });
"""


def install(root: Path | None = None) -> Path:
    """kinesalite under ``root`` (default ``{cache}/kinesis``), installed once with npm;
    the folder to run it from."""
    root = root or cache_dir() / "kinesis"
    if (root / "node_modules" / "kinesalite" / "package.json").exists():
        return root
    if shutil.which("npm") is None:
        raise RuntimeError("npm not found: the local Kinesis server (kinesalite) needs Node "
                           "and npm")
    root.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error",
         "--prefix", str(root), f"kinesalite@{VERSION}"],
        capture_output=True, text=True, check=False, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"npm install kinesalite@{VERSION} failed:\n{result.stderr[-3000:]}")
    return root


@dataclass
class LocalKinesis:
    """One kinesalite server (streams in memory: gone when it stops)."""

    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def endpoint(self) -> str:
        """The server's URL."""
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def start(port: int | None = None, timeout_s: float = 30.0) -> LocalKinesis:
        """Start a server (on ``port``, default a free one) and wait until it accepts
        connections."""
        root = install()
        script = root / "server.js"
        if not script.exists() or script.read_text() != _SERVER_JS:
            script.write_text(_SERVER_JS)
        port = port or free_port()
        log = root / f"kinesalite-{port}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(["node", str(script), str(port)], cwd=root, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        server = LocalKinesis(port, proc, log)

        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return True
            except OSError:
                return False

        wait_started(proc, listening, "kinesalite", log, timeout_s, server.stop, poll_s=0.05)
        return server

    def stop(self) -> None:
        """Stop the server by pid."""
        stop_process(self.proc)


def client(endpoint: str) -> Any:
    """A boto3 Kinesis client of the local server, with its test credentials."""
    import boto3  # noqa: PLC0415 (the kinesis extra; only local tooling needs it here)

    return boto3.client("kinesis", endpoint_url=endpoint, region_name=CREDENTIALS["AWS_REGION"],
                        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])


def create_stream(endpoint: str, stream: str, shards: int, timeout_s: float = 30.0) -> None:
    """Create ``stream`` with ``shards`` shards (if missing) and wait until it is ACTIVE."""
    api = client(endpoint)
    with contextlib.suppress(api.exceptions.ResourceInUseException):  # exists
        api.create_stream(StreamName=stream, ShardCount=shards)
    deadline = time.monotonic() + timeout_s
    while api.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"][
            "StreamStatus"] != "ACTIVE":
        if time.monotonic() > deadline:
            raise RuntimeError(f"Kinesis stream {stream} not ACTIVE within {timeout_s}s")
        time.sleep(0.05)
