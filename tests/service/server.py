"""Real coordinator processes for API tests: ``coxswain serve`` on a free loopback port."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from service.local.ports import cpu_seconds, free_port, wait_until_answering

#: how long a coordinator that keeps getting CPU may take to answer (a starved machine)
STARVED_START_S = 180.0
#: ports a first start tries (each picked free, then possibly taken before it is bound)
PORT_ATTEMPTS = 3


class _PortTaken(RuntimeError):
    """The coordinator exited at start because another socket had its port."""


@dataclass
class Server:
    """One ``coxswain serve`` process; stopped by pid."""

    data_dir: Path
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    launcher: list[str] = field(default_factory=list)  # e.g. ip netns exec NAME
    # HTTPS (``--tls-cert``): its certificate checked with this
    verify: ssl.SSLContext | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.verify is not None else 'http'}://127.0.0.1:{self.port}"

    answered: bool = False  # it answered once (a restart keeps its port: clients have it)

    def start(self, timeout_s: float = 20.0) -> Server:
        """Start it and wait until it answers. A port free when it was picked can be taken
        before the server binds it (the kernel hands the same range out as the local
        ports of outgoing connections, which every Kafka and HTTP client here makes): a
        first start that finds its port taken is tried again on another."""
        for _ in range(PORT_ATTEMPTS - 1):
            try:
                return self._start(timeout_s)
            except _PortTaken:
                if self.answered:
                    raise
                self.port = free_port()
        return self._start(timeout_s)

    def _start(self, timeout_s: float) -> Server:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.data_dir / f"server-{self.port}-{time.monotonic_ns()}.log"
        cmd = [*self.launcher, sys.executable, "-m", "service.cli", "serve", "--port",
               str(self.port),
               "--data-dir", str(self.data_dir), *self.args]
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **self.env})
        # not answering within timeout_s fails it only if it also made no progress then:
        # on a starved machine its imports alone took longer (it was getting CPU)
        hard_deadline = time.monotonic() + max(timeout_s, STARVED_START_S)
        used = cpu_seconds(self.proc.pid)
        while True:
            if wait_until_answering(f"{self.url}/healthz", self.proc, timeout_s,
                                    True if self.verify is None else self.verify):
                self.answered = True
                return self
            now_used = cpu_seconds(self.proc.pid)
            if self.proc.poll() is not None or now_used <= used \
                    or time.monotonic() >= hard_deadline:
                break
            used = now_used
        if self.proc.poll() is not None:
            if "address already in use" in self.log():
                raise _PortTaken(f"port {self.port} taken:\n{self.log()}")
            raise RuntimeError(f"coordinator exited early:\n{self.log()}")
        self.stop()
        raise RuntimeError(f"coordinator did not answer within {timeout_s}s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path and self.log_path.exists() else ""

    def kill(self) -> None:
        """kill -9, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.kill()

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30,
                            verify=True if self.verify is None else self.verify)
