"""The faults, injected one at a time at random (seeded) while the job runs, with the
version watch and the factor changes beside them."""

from __future__ import annotations

import logging
import random
import signal
import threading
import time

import httpx

from bench.chaos.config import FACTORS, ChaosConfig, ChaosReport, FaultCost
from bench.chaos.deployment import Deployment
from service.local.ports import kill_process_group

log = logging.getLogger("coxswain.chaos")


class Chaos:
    """Injects the faults and watches the versions while the job runs."""

    def __init__(self, d: Deployment, config: ChaosConfig, report: ChaosReport) -> None:
        self.d, self.config, self.report = d, config, report
        self.rng = random.Random(config.seed)
        self.seen: dict[int, int] = {}  # replica -> highest version it reported
        self._stop = threading.Event()

    def watch_versions(self) -> None:
        while not self._stop.wait(0.5):
            for i in self.d.live_replicas():
                try:
                    st = httpx.get(self.d.replicas[i].url + "/status", timeout=2).json()
                except (httpx.HTTPError, ValueError):
                    continue
                version = st.get("latestVersion")
                if not isinstance(version, int):
                    continue
                if version < self.seen.get(i, -1):
                    self.report.versions_backwards.append(
                        f"r{i}: {self.seen[i]} then {version}")
                self.seen[i] = max(version, self.seen.get(i, -1))

    def scale(self) -> None:
        n = 0
        while not self._stop.wait(self.config.scale_every_s):
            factor = FACTORS[n % len(FACTORS)]
            for i in self.d.live_replicas():
                try:
                    r = httpx.post(self.d.replicas[i].url + "/scale",
                                   json={"elasticityFactor": factor}, timeout=10)
                except httpx.HTTPError:
                    continue
                if r.status_code == 202:
                    self.report.factor_changes += 1
                    n += 1
                    log.info("elasticity factor -> %d", factor)
                    break

    def _worker(self) -> str:
        return self.rng.choice(sorted(self.d.workers))

    def inject(self, kind: str) -> None:
        d, c = self.d, self.config
        cost = FaultCost(kind, time.time(), 0.0)
        started = time.monotonic()
        if kind == "kill_worker":
            pid = self._worker()
            proc = d.workers[pid]
            cost.victim_pids.add(proc.pid)
            kill_process_group(proc.pid)  # the worker and its JVM, as a host crash would
            proc.wait(30)
            d.start_worker(pid)
        elif kind in ("kill_leader", "stop_leader"):
            leader = d.leader()
            if leader is None:
                return
            server = d.replicas[leader]
            if kind == "kill_leader":
                server.kill()
                time.sleep(c.restart_after_s)
                server.start(timeout_s=60)
            else:
                assert server.proc is not None
                d.stopped.add(leader)
                server.proc.send_signal(signal.SIGSTOP)
                time.sleep(c.stop_leader_s)
                d.resume_replica(leader)
        elif kind == "restart_zookeeper":
            sid = self.rng.choice([m.sid for m in d.zk.members])
            d.zk.stop_member(sid, signal.SIGKILL)
            time.sleep(c.restart_after_s)
            d.zk.start_member(sid)
        elif kind == "stop_postgres":
            d.pg.pause()
            time.sleep(c.pg_outage_s)
            d.pg.resume()
        elif kind == "stop_blob_store":  # unreachable for every worker
            cost.victim_pids |= {w.pid for w in d.workers.values()}
            self._cut([(pid, "blobs") for pid in sorted(d.workers)], c.blob_outage_s)
        elif kind == "partition_worker":  # cut from every replica beyond its lease
            pid = self._worker()
            cost.victim_pids.add(d.workers[pid].pid)
            self._cut([(pid, "coordinator")], c.partition_worker_s)
        elif kind == "partition_leader_from_zookeeper":  # beyond its session
            leader = d.leader()
            if leader is None:
                return
            self._cut([(f"r{leader}", "zookeeper")], c.partition_zookeeper_s)
        elif kind == "partition_worker_from_blob_store":  # commits upload every batch
            pid = self._worker()
            cost.victim_pids.add(d.workers[pid].pid)
            self._cut([(pid, "blobs")], c.partition_blobs_s)
        cost.seconds = time.monotonic() - started
        d.killed_pids |= cost.victim_pids
        self.report.faults[kind] += 1
        self.report.costs.append(cost)
        log.info("fault injected: %s (%.1fs)", kind, cost.seconds)

    def _cut(self, links: list[tuple[str, str]], seconds: float) -> None:
        """Cut the links (host name, link name) for ``seconds``, then restore them."""
        for host, link in links:
            self.d.hosts[host].cut(link)
        try:
            time.sleep(seconds)
        finally:
            for host, link in links:
                self.d.hosts[host].restore(link)

    def run(self, seconds: float) -> None:
        threads = [threading.Thread(target=self.watch_versions, daemon=True),
                   threading.Thread(target=self.scale, daemon=True)]
        for t in threads:
            t.start()
        end = time.monotonic() + seconds
        kinds = self.config.faults
        queue = list(kinds) if self.config.every_fault_once else []
        self.rng.shuffle(queue)
        try:  # (a run that injects every kind once goes on until it did)
            while time.monotonic() < end or queue:
                time.sleep(self.rng.uniform(*self.config.gap_s))
                if time.monotonic() >= end and not queue:
                    break
                self.inject(queue.pop() if queue else self.rng.choice(kinds))
        finally:
            self._stop.set()
            for t in threads:
                t.join(30)
