"""Outages cost no leases: heartbeats that could not be written while the store, ZooKeeper
or the coordinator itself was down never make live workers register again, and the
coordinator answers 503 meanwhile and recovers by itself."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx

from service.local.zookeeper import ZooKeeperEnsemble
from tests.infra.postgres import PostgresServer
from tests.service.conftest import StartServer
from tests.service.ha import replicas, wait_leader
from tests.service.workers import SimWorker, joined

TTL_MS = 2000
ARGS = ("--input", "kafka.orders:2", "--debounce-ms", "50", "--lease-ttl-ms", str(TTL_MS),
        "--heartbeat-interval-ms", "400", "--barrier-timeout-ms", "30000")


def _heartbeat_until_ok(url: str, pid: str, timeout_s: float) -> list[int]:
    """Heartbeat every 0.2 s until one answers 200; the statuses seen (a 404 ends it:
    the worker would have been told to stop)."""
    seen: list[int] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            status = httpx.post(f"{url}/processors/{pid}/heartbeat", json={}, timeout=5,
                                headers=SimWorker.lease_of(pid)).status_code
        except httpx.HTTPError:
            status = 0  # not answering (restarting)
        seen.append(status)
        if status in (200, 404):
            return seen
        time.sleep(0.2)
    return seen


def test_a_coordinator_down_longer_than_the_lease_ttl_costs_no_lease(
    start_server: StartServer, tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    server = start_server(*ARGS, data_dir=data)
    with server.client() as c:
        _, model = joined(c, "w1", "host-a")
    server.kill()
    time.sleep(TTL_MS / 1000 * 1.75)  # down longer than the TTL: no heartbeat lands
    again = start_server(*ARGS, data_dir=data)
    seen = _heartbeat_until_ok(again.url, "w1", 10)
    assert seen[-1] == 200, seen
    with again.client() as c:
        time.sleep(TTL_MS / 1000 / 2)
        assert SimWorker(c, "w1", "host-a").heartbeat().status_code == 200
        now = c.get("/jobmodel").json()
        assert now["version"] == model["version"]  # nobody expired, nothing regenerated
        assert "w1" in now["containers"]


def test_a_postgresql_outage_answers_503_costs_no_lease_and_recovers(
    start_server: StartServer,
) -> None:
    pg = PostgresServer.start()  # its own: this test stops it
    try:
        server = start_server(*ARGS, "--store", pg.create_database())
        with server.client() as c:
            w1, model = joined(c, "w1", "host-a")
            pg.pause()
            outage_started = time.monotonic()
            during = w1.heartbeat()
            assert during.status_code == 503, during.text
            assert during.json()["error"] == "store_unavailable"
            assert c.get("/readyz").status_code == 503
            time.sleep(max(0.0, TTL_MS / 1000 * 1.75 - (time.monotonic() - outage_started)))
            pg.resume()
            seen = _heartbeat_until_ok(server.url, "w1", 20)
            assert seen[-1] == 200, seen  # never 404: the worker keeps its tasks
            # heartbeats go on; a full TTL later nobody has been expired
            for _ in range(int(TTL_MS / 400) + 2):
                assert w1.heartbeat().status_code == 200
                time.sleep(0.4)
            assert c.get("/readyz").status_code == 200
            now = c.get("/jobmodel").json()
            assert now["version"] == model["version"] and "w1" in now["containers"]
    finally:
        pg.stop()


def test_a_zookeeper_outage_longer_than_the_lease_ttl_costs_no_lease(tmp_path: Path) -> None:
    zk = ZooKeeperEnsemble.start(1)
    try:
        with replicas(tmp_path, zk.connect_string, 1, *ARGS,
                      "--zk-session-timeout-ms", "10000") as servers:
            wait_leader(servers)
            url = servers[0].url
            with httpx.Client(base_url=url, timeout=15) as c:
                _, model = joined(c, "w1", "host-a")
                zk.stop_member(1, signal.SIGKILL)
                time.sleep(TTL_MS / 1000 * 2)  # longer than the TTL, within the session
                w1 = SimWorker(c, "w1", "host-a")
                beat = w1.heartbeat()
                assert beat.status_code == 503, beat.text
                zk.start_member(1)
                seen = _heartbeat_until_ok(url, "w1", 30)
                assert seen[-1] == 200, seen
                for _ in range(int(TTL_MS / 400) + 2):
                    assert w1.heartbeat().status_code == 200
                    time.sleep(0.4)
                now = c.get("/jobmodel").json()
                assert "w1" in now["containers"]
                assert now["version"] == model["version"]
    finally:
        zk.stop()
