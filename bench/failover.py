"""Failover times of coordinator replicas on a real ZooKeeper, with default settings
(ZooKeeper session 6 s, lease TTL 10 s, debounce 1 s); median of 5 runs each.

* leader failover: kill -9 of the leader replica, then at once ``POST /scale`` to a
  surviving replica (so that a new version is due): time until that version is published
  by the new leader;
* worker failover: a simulated worker stops heartbeating (kill -9 of a worker) right
  after a heartbeat; the other workers ack every version as they see it: time from its
  last heartbeat until the model without it has its barrier done (its tasks active
  elsewhere).

* worker failover, poll closed: the same, but the victim has a long poll open at the
  leader when it dies (as a real worker does) and its connection closes then;
* follower notification: long polls parked on a follower replica; the leader publishes
  (``POST /scale`` to the leader); delay from the leader's publication time
  (``lastRebalance.at``) to each waiter's answer (p50/p99 over 10 publications x 16 waiters).

Run: python -m bench.failover [--runs 5]
Targets (issue #4): leader failover < 2 x session timeout (12 s); worker failover <
lease TTL + debounce + 1 s (12 s); followers wake long polls within 100 ms of a
publication. Samza standalone's defaults: 30 s session + 20 s debounce.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench.api import raw_long_poll
from service.local.zookeeper import ZooKeeperEnsemble
from tests.service.ha import Fleet, index_of, replicas, wait_leader

INPUT = ("--input", "kafka.orders:32")
WORKERS = 8


def leader_failover(root: Path, zk: str, runs: int) -> list[float]:
    times = []
    with replicas(root, zk, 3, *INPUT) as servers:
        fleet = Fleet(servers, WORKERS)
        fleet.register_all()
        with fleet.heartbeating(1.0):
            fleet.settle()
            for run in range(runs):
                leader = wait_leader(servers)
                victim = servers[index_of(leader)]
                before = fleet.model()["version"]
                survivor = next(s for s in servers if s is not victim)
                victim.kill()
                killed = time.monotonic()
                factor = 2 ** (run % 2 + 1)
                r = httpx.post(f"{survivor.url}/scale", json={"elasticityFactor": factor},
                               timeout=60)
                assert r.status_code == 202, r.text
                while fleet.model()["version"] <= before:
                    time.sleep(0.01)
                times.append(time.monotonic() - killed)
                print(f"  leader failover run {run + 1}: {times[-1]:.2f} s", flush=True)
                fleet.settle()
                victim.start()  # back as a follower for the next run
    return times


def worker_failover(root: Path, zk: str, runs: int) -> list[float]:
    times = []
    with replicas(root, zk, 3, *INPUT) as servers:
        for run in range(runs):
            fleet = Fleet(servers, WORKERS)
            fleet.ids = [f"r{run}-w{i}" for i in range(WORKERS)]
            fleet.register_all()
            with fleet.heartbeating(2.0):
                fleet.settle()
                victim = fleet.ids[-1]
                fleet.call("POST", f"/processors/{victim}/heartbeat", json={},
                           headers=fleet.lease(victim))
                last_beat = time.monotonic()
                fleet.ids.remove(victim)
                fleet.settle(timeout_s=120)
                times.append(time.monotonic() - last_beat)
                print(f"  worker failover run {run + 1}: {times[-1]:.2f} s", flush=True)
            for pid in fleet.ids:  # leave, so the next run starts clean
                fleet.call("DELETE", f"/processors/{pid}", headers=fleet.lease(pid))
    return times


def worker_failover_poll_closed(root: Path, zk: str, runs: int
                                ) -> tuple[list[float], list[float]]:
    """As ``worker_failover``, but the victim, like a real worker, has a long poll open at
    the leader (with its lease token) when it dies, and its connection closes then: the
    time from that moment until the model without it has its barrier done, and until that
    model was published (the leader's ``lastRebalance.at``, same host clock)."""
    times: list[float] = []
    published: list[float] = []
    with replicas(root, zk, 3, *INPUT) as servers:
        leader = servers[index_of(wait_leader(servers))]
        for run in range(runs):
            fleet = Fleet(servers, WORKERS)
            fleet.ids = [f"p{run}-w{i}" for i in range(WORKERS)]
            fleet.register_all()
            with fleet.heartbeating(2.0):
                version = fleet.settle()["version"]
                victim = fleet.ids[-1]
                token = fleet.lease(victim)["Coxswain-Lease-Token"]
                sock = socket.create_connection(("127.0.0.1", leader.port), timeout=5)
                sock.sendall((f"GET /jobmodel?processorId={victim}&since={version}"
                              f"&waitMs=60000 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              f"Coxswain-Lease-Token: {token}\r\n\r\n").encode())
                time.sleep(0.5)  # parked at the leader
                fleet.ids.remove(victim)  # it heartbeats no more ...
                sock.close()  # ... and its connections close: kill -9
                killed, killed_wall = time.monotonic(), time.time()
                fleet.settle(timeout_s=120)
                times.append(time.monotonic() - killed)
                status = httpx.get(f"{leader.url}/status", timeout=10).json()
                published.append(status["lastRebalance"]["at"] - killed_wall)
                print(f"  worker failover (poll closed) run {run + 1}: published "
                      f"{published[-1]:.2f} s, barrier done {times[-1]:.2f} s", flush=True)
            for pid in fleet.ids:
                fleet.call("DELETE", f"/processors/{pid}", headers=fleet.lease(pid))
    return times, published


async def _notify_rounds(leader_url: str, follower_port: int, rounds: int) -> list[float]:
    delays: list[float] = []
    async with httpx.AsyncClient(base_url=leader_url, timeout=60) as lc:
        for r in range(rounds):
            version = (await lc.get("/status")).json()["latestVersion"]
            waiters = [asyncio.create_task(raw_long_poll(follower_port, version))
                       for _ in range(16)]
            await asyncio.sleep(0.3)
            resp = await lc.post("/scale", json={"elasticityFactor": 2 ** (r % 2 + 1)})
            assert resp.status_code == 202, resp.text
            answered = await asyncio.gather(*waiters)
            published = (await lc.get("/status")).json()["lastRebalance"]["at"]
            delays.extend(t - published for t in answered)
    return sorted(delays)


def follower_notification(root: Path, zk: str, rounds: int) -> list[float]:
    with replicas(root, zk, 2, *INPUT) as servers:
        fleet = Fleet(servers, WORKERS)
        fleet.register_all()
        with fleet.heartbeating(1.0):
            fleet.settle()
            leader = servers[index_of(wait_leader(servers))]
            follower = next(s for s in servers if s is not leader)
            return asyncio.run(_notify_rounds(leader.url, follower.port, rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", choices=["poll-closed"],
                        help="run only the closed-poll worker failover")
    args = parser.parse_args()
    zk = ZooKeeperEnsemble.start(1)
    rows: list[tuple[str, list[float], float]] = []
    wake: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if args.only is None:
                rows.append(("leader", leader_failover(
                    Path(tmp) / "leader", zk.connect_string, args.runs), 12.0))
                rows.append(("worker, lease only", worker_failover(
                    Path(tmp) / "worker", zk.connect_string, args.runs), 12.0))
            closed, published = worker_failover_poll_closed(
                Path(tmp) / "closed", zk.connect_string, args.runs)
            rows.append(("worker, poll closed, to publication", published, 3.0))
            rows.append(("worker, poll closed, to barrier done", closed, 3.0))
            if args.only is None:
                wake = follower_notification(Path(tmp) / "notify", zk.connect_string, 10)
    finally:
        zk.stop()
    print("| failover | median s | min s | max s | target s |")
    print("|----------|----------|-------|-------|----------|")
    for name, times, target in rows:
        print(f"| {name:8} | {statistics.median(times):8.2f} | {min(times):5.2f} | "
              f"{max(times):5.2f} | {target:8.1f} |")
    if not wake:
        return
    p99 = wake[max(0, int(len(wake) * 0.99) - 1)]
    print(f"follower long-poll wake after publication: p50 {statistics.median(wake) * 1000:.1f}"
          f" ms, p99 {p99 * 1000:.1f} ms, max {wake[-1] * 1000:.1f} ms (target < 100 ms)")


if __name__ == "__main__":
    main()
