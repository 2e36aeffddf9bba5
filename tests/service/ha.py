"""Helpers for high-availability tests: coordinator replicas sharing a real ZooKeeper, and
simulated workers that talk to whichever replica answers (as behind a load balancer)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.service.server import Server


def replica_args(zk: str, job: str, store_url: str, *extra: str) -> list[str]:
    return ["--zk", zk, "--job", job, "--store", store_url, *extra]


@contextmanager
def replicas(root: Path, zk: str, count: int, *extra: str,
             store_url: str | None = None) -> Iterator[list[Server]]:
    """``count`` replicas of one job (ids r0..), always stopped by pid."""
    job = f"job-{uuid.uuid4().hex[:8]}"
    url = store_url or f"sqlite:///{root}/checkpoints.db"
    servers: list[Server] = []
    try:
        for i in range(count):
            data = root / f"r{i}"
            data.mkdir(parents=True, exist_ok=True)
            servers.append(Server(data, [*replica_args(zk, job, url, *extra),
                                         "--replica-id", f"r{i}"]))
        for s in servers:
            s.start()
        yield servers
    finally:
        for s in servers:
            s.stop()


def status(server: Server) -> dict[str, Any] | None:
    try:
        r = httpx.get(f"{server.url}/status", timeout=2)
    except httpx.HTTPError:
        return None
    return dict(r.json()) if r.status_code == 200 else None


def wait_leader(servers: list[Server], timeout_s: float = 30,
                not_: str | None = None) -> str:
    """The replica id every live replica names as leader (and that is not ``not_``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        named = {st["leaderId"] for s in servers
                 if s.proc is not None and s.proc.poll() is None and (st := status(s))}
        if len(named) == 1:
            leader = named.pop()
            if leader is not None and leader != not_:
                return str(leader)
        time.sleep(0.05)
    raise AssertionError(f"no single leader within {timeout_s}s")


def index_of(leader: str) -> int:
    return int(leader.removeprefix("r"))


class Fleet:
    """``n`` simulated workers; each call goes to the next replica that answers."""

    def __init__(self, servers: list[Server], n: int) -> None:
        self.servers = servers
        self.ids = [f"w{i:02d}" for i in range(n)]
        self._next = 0
        self._lock = threading.Lock()
        self.errors: list[str] = []
        self.lost_leases: list[str] = []
        self.tokens: dict[str, str] = {}  # lease token of each worker's registration

    def lease(self, pid: str) -> dict[str, str]:
        """The header carrying ``pid``'s lease token."""
        return {"Coxswain-Lease-Token": self.tokens[pid]} if pid in self.tokens else {}

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send to replicas in turn until one answers with something other than 5xx."""
        last: httpx.Response | None = None
        for _ in range(len(self.servers) * 20):
            with self._lock:
                server = self.servers[self._next % len(self.servers)]
                self._next += 1
            if server.proc is None or server.proc.poll() is not None:
                continue
            try:
                r = httpx.request(method, f"{server.url}{path}", timeout=5, **kwargs)
            except httpx.HTTPError:
                time.sleep(0.05)
                continue
            if r.status_code < 500:
                return r
            last = r
            time.sleep(0.05)
        raise AssertionError(f"no replica answered {method} {path}: "
                             f"{last.text if last is not None else 'connection refused'}")

    def register_all(self) -> None:
        for i, pid in enumerate(self.ids):
            r = self.call("POST", "/processors", json={"processorId": pid,
                                                        "locationId": f"host-{i % 5}"})
            assert r.status_code in (200, 201), r.text
            self.tokens[pid] = r.json()["leaseToken"]

    def heartbeat_all(self) -> None:
        for pid in self.ids:
            r = self.call("POST", f"/processors/{pid}/heartbeat", json={},
                          headers=self.lease(pid))
            if r.status_code == 404:
                self.lost_leases.append(pid)

    @contextmanager
    def heartbeating(self, interval_s: float = 0.5) -> Iterator[None]:
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                try:
                    self.heartbeat_all()
                except AssertionError as e:
                    self.errors.append(str(e))
                stop.wait(interval_s)

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        try:
            yield
        finally:
            stop.set()
            t.join(30)

    def model(self) -> dict[str, Any]:
        r = self.call("GET", "/jobmodel")
        if r.status_code == 404:  # the first version is still to come
            return {"version": 0, "containers": {}, "barrier": "pending"}
        assert r.status_code == 200, r.text
        return dict(r.json())

    def settle(self, timeout_s: float = 60) -> dict[str, Any]:
        """Ack every version until the latest model holds every worker and is done."""
        deadline = time.monotonic() + timeout_s
        model: dict[str, Any] = {}
        while time.monotonic() < deadline:
            model = self.model()
            if set(model["containers"]) == set(self.ids):
                if model["barrier"] == "done":
                    return model
                for pid in model["containers"]:
                    self.call("POST", f"/jobmodel/{model['version']}/ack",
                              json={"processorId": pid}, headers=self.lease(pid))
                continue
            time.sleep(0.1)
        raise AssertionError(
            "the fleet did not settle on one done job model; last seen: version "
            f"{model.get('version')}, processors {sorted(model.get('containers', {}))}, "
            f"barrier {model.get('barrier')}; heartbeat errors {self.errors[-3:]}, "
            f"lost leases {self.lost_leases}\n{self.log_tails()}")

    def log_tails(self, lines: int = 40) -> str:
        """The last lines of every replica's log, for a failure message."""
        return "\n".join(f"--- {server.url} ---\n" + "\n".join(server.log().splitlines()[-lines:])
                         for server in self.servers)
