"""A real PostgreSQL server for tests, from Debian's ``postgresql`` package.

Its data directory lives under the repository's git-ignored ``.cache/`` folder; it listens
on a free loopback port (TCP only) and is stopped by the postmaster's pid. PostgreSQL
refuses to run as root, so when the tests run as root the server runs as the ``postgres``
user the package creates.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

from service.local.ports import free_port, wait_started

REPO = Path(__file__).resolve().parents[2]
HOW_TO_INSTALL = ("PostgreSQL binaries not found: run ./deploy/test.sh (it installs Debian's "
                  "'postgresql' package), or apt-get install postgresql")


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError(HOW_TO_INSTALL)
    return Path(found[-1]).parent


@dataclass
class PostgresServer:
    """One postmaster with a throw-away cluster."""

    data_dir: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        """SQLAlchemy URL of ``database``."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    @staticmethod
    def start() -> PostgresServer:
        bin_dir = _bin_dir()
        root = REPO / ".cache" / "postgres"
        root.mkdir(parents=True, exist_ok=True)
        data_dir = root / f"cluster-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        # Run as the postgres user directly (not through runuser), so that proc.pid is the
        # postmaster's own pid and a signal to it reaches the server.
        as_user: dict[str, object] = {}
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
            as_user = {"user": "postgres", "group": "postgres", "extra_groups": []}
        subprocess.run([str(bin_dir / "initdb"), "-D", str(data_dir), "-U",
                        "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"],
                       check=True, capture_output=True, cwd=root, **as_user)  # type: ignore[call-overload]
        server = PostgresServer(data_dir, free_port())
        server.resume()
        return server

    def resume(self) -> None:
        """Start the postmaster on the cluster and port (again, after :meth:`pause`);
        returns once it accepts connections."""
        root = self.data_dir.parent
        as_user: dict[str, object] = {}
        if os.geteuid() == 0:
            as_user = {"user": "postgres", "group": "postgres", "extra_groups": []}
        log = (root / f"{self.data_dir.name}.log").open("ab")
        if os.geteuid() == 0:
            shutil.chown(log.name, "postgres", "postgres")
        self.proc = subprocess.Popen(  # type: ignore[call-overload]
            [str(_bin_dir() / "postgres"), "-D", str(self.data_dir), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=",
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "max_connections=200"],
            stdout=log, stderr=subprocess.STDOUT, cwd=root, **as_user)

        def accepting() -> bool:
            try:
                with psycopg.connect(self.admin_url, connect_timeout=1):
                    return True
            except psycopg.OperationalError:
                return False

        # on a failure or an interruption the postmaster only is stopped: the cluster is
        # the fixture's to remove
        wait_started(self.proc, accepting, "postgres", Path(log.name), 30, self.pause)

    def pause(self) -> None:
        """Shut the postmaster down (an outage), keeping the cluster for :meth:`resume`."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # "fast shutdown" of the postmaster
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def create_database(self) -> str:
        """A fresh, empty database; returns its SQLAlchemy URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Fast shutdown by the postmaster's pid, then remove the cluster."""
        self.pause()
        shutil.rmtree(self.data_dir, ignore_errors=True)
