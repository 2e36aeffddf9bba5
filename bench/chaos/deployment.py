"""Every process of a chaos run, each stopped by pid: a ZooKeeper ensemble of 3,
PostgreSQL, a Kafka broker, 3 coordinator replicas and the Spark workers; a stateful run
adds an S3 API server (the blob store) and puts each replica and each worker in a
network namespace of its own (``tests.infra.netns``), linked to the services it uses by
links that the faults cut: a replica by ``zookeeper``, ``store`` (PostgreSQL) and
``kafka`` links, its API exposed back; a worker by ``coordinator``, ``kafka`` and
``blobs`` links."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench.chaos.config import ChaosConfig
from service.local.kafka import LocalKafka
from service.local.orders import create_topics
from service.local.ports import stop_process_group
from service.local.s3 import CREDENTIALS, LocalS3
from service.local.zookeeper import ZooKeeperEnsemble
from tests.infra.netns import Host
from tests.infra.postgres import PostgresServer
from tests.service.server import Server


class Deployment:
    """The services, replicas and workers of one run."""

    def __init__(self, root: Path, config: ChaosConfig, kafka: LocalKafka | None = None,
                 pg: PostgresServer | None = None, s3: LocalS3 | None = None) -> None:
        """``kafka``, ``pg``, ``s3``: servers shared with the caller (a test session),
        used but not stopped; others are started and stopped here."""
        self.root, self.config = root, config
        self._own = {"kafka": kafka is None, "pg": pg is None, "s3": s3 is None}
        self.hosts: dict[str, Host] = {}
        self.zk = ZooKeeperEnsemble.start(3)
        self.pg = pg or PostgresServer.start()
        self.store_url = self.pg.create_database()
        self.kafka = kafka or LocalKafka.create().start()
        self.s3: LocalS3 | None = None
        self.bucket = f"chaos-{uuid.uuid4().hex[:8]}"
        if config.stateful:
            self.s3 = s3 or LocalS3.start()
            self.s3.create_bucket(self.bucket)
        self.topic, self.output = (f"chaos-in-{uuid.uuid4().hex[:6]}",
                                   f"chaos-out-{uuid.uuid4().hex[:6]}")
        create_topics(self.kafka.bootstrap, [(self.topic, config.partitions),
                                              (self.output, 1)])
        job = f"chaos-{uuid.uuid4().hex[:6]}"
        stateful = ["--stateful", "--num-standbys", "1"] if config.stateful else []
        self.replicas = [Server(root / f"r{i}", [
            "--zk", self.zk.connect_string, "--job", job, "--store", self.store_url,
            "--replica-id", f"r{i}", "--kafka-bootstrap", self.kafka.bootstrap,
            "--input", f"kafka.{self.topic}", "--debounce-ms", "500",
            "--lease-ttl-ms", str(config.lease_ttl_ms), "--barrier-timeout-ms", "30000",
            "--partition-poll-interval-ms", "2000", "--zk-session-timeout-ms", "6000",
            "--max-elasticity-factor", "8", *stateful]) for i in range(3)]
        # host numbers (the links' subnets and device names) from a random base: a run
        # beside another on the same machine is unlikely to meet its names
        self._base = random.Random().randrange(1, 200 // 10) * 10
        try:
            if config.stateful:
                for i, r in enumerate(self.replicas):
                    host = self._host(f"r{i}", i).link(
                        "zookeeper", reach=tuple(m.client_port for m in self.zk.members))
                    host.link("store", reach=(self.pg.port,))
                    host.link("kafka", reach=(self.kafka.port,))
                    host.link("api", expose=(r.port,)).start()
                    r.launcher = ["ip", "netns", "exec", host.name]
            for r in self.replicas:
                r.start(timeout_s=60)
        except BaseException:
            self.close()
            raise
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.killed_pids: set[int] = set()  # killed -9, or cut off from the others
        self.stopped: set[int] = set()  # replicas under SIGSTOP

    def _host(self, name: str, index: int) -> Host:
        host = Host(f"cx-{self.bucket[-6:]}-{name}", self._base + index, self.root)
        self.hosts[name] = host
        return host

    @property
    def urls(self) -> str:
        return ",".join(r.url for r in self.replicas)

    def start_worker(self, pid: str) -> None:
        """Start (or restart) worker ``pid``; in a stateful run, in its own namespace."""
        c = self.config
        args = [sys.executable, "-m", "service.cli", "worker", "--coordinator", self.urls,
                "--kafka-bootstrap", self.kafka.bootstrap, "--processor-id", pid,
                "--location", f"host-{pid}", "--spark-master", "local[1]",
                "--max-offsets-per-trigger", "2000",
                # each batch's ranges, starts, cuts and commit: a failed check traces
                # its lost records through them (``bench.chaos.trace``)
                "--log-level", "INFO,coxswain.worker.batches=DEBUG"]
        env = {**os.environ, "KAFKA_BOOTSTRAP": self.kafka.bootstrap,
               "OUTPUT_TOPIC": self.output}
        log = (self.root / f"{pid}.log").open("ab")
        if not c.stateful:
            self.workers[pid] = subprocess.Popen(
                [*args, "--app", "bench.chaos.apps:record_with_pid"], stdout=log,
                stderr=subprocess.STDOUT, env=env,
                start_new_session=True)  # its JVM in its process group
            return
        assert self.s3 is not None
        host = self.hosts.get(pid)
        if host is None:
            host = self._host(pid, 3 + len([h for h in self.hosts if h.startswith("w")]))
            host.link("coordinator", reach=tuple(r.port for r in self.replicas))
            host.link("kafka", reach=(self.kafka.port,))
            host.link("blobs", reach=(self.s3.port,)).start()
        self.workers[pid] = host.popen(
            [*args, "--api", "task", "--app", "bench.chaos.apps:count_with_pid",
             "--output-topic", self.output, "--stateful", "--state-dir",
             str(self.root / f"state-{pid}"), "--blob-store", f"s3://{self.bucket}/chaos",
             "--blob-store-endpoint", self.s3.endpoint,
             # a hand-over waits for its last commit less than the barrier's timeout
             "--max-commit-delay-ms", "20000", *(["--exactly-once"] * c.exactly_once)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**env, **CREDENTIALS, "CHAOS_PAD_BYTES": str(c.pad_bytes)})

    def live_replicas(self) -> list[int]:
        return [i for i, r in enumerate(self.replicas)
                if r.proc is not None and r.proc.poll() is None and i not in self.stopped]

    def get(self, path: str) -> dict[str, Any] | None:
        """``path`` from the first replica that answers."""
        for i in self.live_replicas():
            try:
                r = httpx.get(self.replicas[i].url + path, timeout=5)
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                return dict(r.json())
        return None

    def leader(self) -> int | None:
        st = self.get("/status")
        leader = st.get("leaderId") if st else None
        return int(str(leader).removeprefix("r")) if leader else None

    def resume_replica(self, i: int) -> None:
        proc = self.replicas[i].proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
        self.stopped.discard(i)

    def restore_links(self) -> None:
        """Every cut link back up."""
        for host in self.hosts.values():
            for name, link in host.links.items():
                if not link.up:
                    host.restore(name)

    def close(self) -> None:
        for i in list(self.stopped):
            self.resume_replica(i)
        self.restore_links()
        for w in getattr(self, "workers", {}).values():
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in getattr(self, "workers", {}).values():
            stop_process_group(w, grace_s=60)
        for r in self.replicas:
            r.stop()
        for host in self.hosts.values():
            host.stop()
        if self._own["kafka"]:
            self.kafka.destroy()
        if self._own["pg"]:
            self.pg.stop()
        elif self.pg.proc is None or self.pg.proc.poll() is not None:
            self.pg.resume()  # running again for the caller, even after a failed run
        if self.s3 is not None and self._own["s3"]:
            self.s3.stop()
        self.zk.stop()
