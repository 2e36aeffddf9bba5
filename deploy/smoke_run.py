"""Proves the README's command 1 as a new user meets it: ``./deploy/run.sh`` in a clean
virtual environment with only the runtime install (no dev extras) serves the coordinator.

    python3 deploy/smoke_run.py

Standard library only (it runs before anything is installed). Steps: a copy of the files
a fresh clone has (git's tracked and unignored files, as they are in the working tree) in
a scratch folder, so nothing in the checkout is written and ``.ci/run`` can run this
beside ``deploy/setup.sh --dev`` (both installs are editable: each writes its
``coxswain.egg-info`` into the tree it installs from); ``deploy/run.sh`` of that copy
started in the background on a free port with a scratch data dir, installing into the
copy's new ``.venv``; ``/healthz``, a registration, a heartbeat and the
processor's first job model (long poll) answered; the server stopped by pid (SIGTERM, it
must exit by itself). Then a second start, which must skip the install (the stamp) and
serve again. Exits non-zero with the server's output when any step fails; the copy, its
virtual environment and the data are removed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# never copied when git cannot list the clone's files (a source archive, not a checkout)
NOT_IN_A_CLONE = (".git", ".venv", ".cache", "coxswain-data", "__pycache__",
                  ".mypy_cache", ".ruff_cache", "*.egg-info")
INSTALL_TIMEOUT_S = 900.0  # pip with a cold cache on a slow link; the process is watched too
STOP_TIMEOUT_S = 20.0


class SmokeFailed(Exception):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def call(url: str, method: str = "GET", body: object = None, timeout: float = 30.0,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={
        "content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


class Server:
    """``deploy/run.sh`` in the background; its output goes to a log file."""

    def __init__(self, tree: Path, port: int, data_dir: Path, log: Path) -> None:
        self.port = port
        self.log = log
        env = {k: v for k, v in os.environ.items() if k != "COXSWAIN_VENV"}  # its .venv
        with log.open("wb") as out:
            # run.sh execs `coxswain serve`: this pid is the server's own
            self.proc = subprocess.Popen(
                ["./deploy/run.sh", "--port", str(port), "--data-dir", str(data_dir)],
                cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)  # its pip: one group

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_serving(self, timeout_s: float) -> float:
        """Seconds until ``/healthz`` answered; fails when the process exits first."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.proc.poll() is not None:
                raise SmokeFailed(f"run.sh exited with {self.proc.returncode} before serving")
            try:
                status, body = call(f"{self.url}/healthz", timeout=2)
                if status == 200 and body == {"status": "ok"}:
                    return time.monotonic() - started
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        raise SmokeFailed(f"/healthz did not answer within {timeout_s:.0f}s")

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise SmokeFailed(f"the server ignored SIGTERM for {STOP_TIMEOUT_S:.0f}s") from None


def first_run(server: Server) -> None:
    took = server.wait_serving(INSTALL_TIMEOUT_S)
    print(f"smoke: install + start served /healthz after {took:.0f}s", flush=True)
    status, body = call(f"{server.url}/processors", "POST",
                        {"processorId": "smoke-1", "locationId": "host-a"})
    if status != 201:
        raise SmokeFailed(f"registration answered {status}: {body}")
    lease = {"Coxswain-Lease-Token": body["leaseToken"]}
    status, body = call(f"{server.url}/processors/smoke-1/heartbeat", "POST", {},
                        headers=lease)
    if status != 200:
        raise SmokeFailed(f"heartbeat answered {status}: {body}")
    status, body = call(f"{server.url}/jobmodel?processorId=smoke-1&since=0&waitMs=15000")
    containers = body.get("containers", {}) if isinstance(body, dict) else {}
    if status != 200 or "smoke-1" not in containers:
        raise SmokeFailed(f"the first job model did not include smoke-1: {status} {body}")
    tasks = len(containers["smoke-1"].get("tasks", {}))
    print(f"smoke: registered, heartbeat, job model version {body['version']} with "
          f"{tasks} tasks for smoke-1", flush=True)


def copy_clone(tree: Path) -> int:
    """Copies into ``tree`` the files a fresh clone of this checkout has, as they are in
    the working tree (uncommitted edits included, ignored files not); the number copied."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=False)
    if listed.returncode != 0:  # not a git checkout: everything but the local state
        shutil.copytree(ROOT, tree, symlinks=True,
                        ignore=shutil.ignore_patterns(*NOT_IN_A_CLONE))
        return sum(1 for f in tree.rglob("*") if f.is_file())
    copied = 0
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if not source.is_file():
            continue  # tracked but deleted in the working tree
        target = tree / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)  # modes: the scripts run
        copied += 1
    return copied


def slim_install_says_what_the_worker_needs(venv: Path) -> None:
    """The coordinator's install has no PySpark: ``coxswain worker`` must say how to get
    it, not fail on an import."""
    for heavy in ("pyspark", "pandas", "rocksdict"):
        found = subprocess.run([str(venv / "bin" / "python"), "-c", f"import {heavy}"],
                               capture_output=True, check=False)
        if found.returncode == 0:
            raise SmokeFailed(f"the coordinator's install pulled in {heavy}")
    worker = subprocess.run([str(venv / "bin" / "coxswain"), "worker", "--app", "m:f"],
                            capture_output=True, text=True, timeout=60, check=False)
    if worker.returncode == 0 or "coxswain[worker]" not in worker.stderr:
        raise SmokeFailed(f"coxswain worker without the worker extra: {worker.stderr[-2000:]}")
    print("smoke: the coordinator install has no PySpark, pandas or RocksDB, and "
          "`coxswain worker` says to install coxswain[worker]", flush=True)


def main() -> int:
    # stopped (.ci/run stops it when the dev install fails): the servers and the copy go
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    work = Path(tempfile.mkdtemp(prefix="coxswain-smoke-"))
    tree = work / "coxswain"  # a fresh clone: no venv, only what run.sh installs
    servers: list[Server] = []
    try:
        print(f"smoke: {copy_clone(tree)} files of a fresh clone copied to {tree}",
              flush=True)
        server = Server(tree, free_port(), work / "data", work / "first.log")
        servers.append(server)
        first_run(server)
        server.stop()
        print("smoke: stopped by pid", flush=True)
        again = Server(tree, free_port(), work / "data", work / "second.log")
        servers.append(again)
        took = again.wait_serving(120)
        if "installing coxswain" in again.output():
            raise SmokeFailed("the second start ran pip again although nothing changed")
        again.stop()
        print(f"smoke: restart skipped the install and served after {took:.1f}s", flush=True)
        slim_install_says_what_the_worker_needs(tree / ".venv")
        return 0
    except SmokeFailed as e:
        for s in servers:
            print(f"--- output of {s.log.name} ---\n{s.output()[-6000:]}", file=sys.stderr)
        print(f"smoke: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        for s in servers:
            if s.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(s.proc.pid, signal.SIGKILL)  # with a pip still installing
                s.proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
