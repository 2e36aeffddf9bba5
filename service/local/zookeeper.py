"""A real ZooKeeper (one server or an ensemble) for tests and ``coxswain dev up``, from
Debian's ``zookeeper`` package: ``java -cp /usr/share/java/zookeeper.jar ...
QuorumPeerMain zoo.cfg``.

Each member listens on a free loopback port with its data under the repository's
git-ignored ``.cache/zookeeper/``; members are started and stopped by pid. ``tickTime`` is
200 ms with ``minSessionTimeout`` 400 ms, so the session timeouts the tests ask for are
honoured instead of being clamped to 4 s.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from common.paths import cache_dir
from service.local.ports import free_ports, stop_process

JARS = Path("/usr/share/java")
HOW_TO_INSTALL = ("ZooKeeper not found at /usr/share/java/zookeeper.jar: run ./deploy/test.sh "
                  "(it installs Debian's 'zookeeper' package), or apt-get install zookeeper")
MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


def _classpath() -> str:
    if not (JARS / "zookeeper.jar").exists():
        raise RuntimeError(HOW_TO_INSTALL)
    # zookeeper.jar's manifest names the rest; netty-codec and a logger binding it omits.
    extra = [JARS / "netty-codec.jar", JARS / "slf4j-nop.jar"]
    return ":".join(str(p) for p in [JARS / "zookeeper.jar", *extra] if p.exists())


def four_letter(port: int, command: str, timeout: float = 1.0) -> str:
    """Send a four-letter word (``ruok``, ``srvr``...) and return the answer ("" if none)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(command.encode())
            chunks = []
            while True:
                data = s.recv(4096)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


@dataclass
class Member:
    """One ZooKeeper server of an ensemble."""

    sid: int
    client_port: int
    peer_port: int
    election_port: int
    data_dir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def mode(self) -> str | None:
        """``standalone``, ``leader`` or ``follower`` once serving, else None."""
        for line in four_letter(self.client_port, "srvr").splitlines():
            if line.startswith("Mode: "):
                return line.removeprefix("Mode: ").strip()
        return None


@dataclass
class ZooKeeperEnsemble:
    """``size`` ZooKeeper servers on loopback; ``connect_string`` lists them all."""

    root: Path
    members: list[Member] = field(default_factory=list)
    # SASL DIGEST-MD5 users (name -> password) the servers accept besides anonymous and
    # digest clients (a SASL authentication provider and a JAAS Server section)
    sasl_users: dict[str, str] = field(default_factory=dict)

    @property
    def connect_string(self) -> str:
        return ",".join(f"127.0.0.1:{m.client_port}" for m in self.members)

    @staticmethod
    def start(size: int = 1, timeout_s: float = 60.0,
              client_port: int | None = None,
              sasl_users: dict[str, str] | None = None) -> ZooKeeperEnsemble:
        """Start ``size`` members and wait until they serve (a quorum, for an ensemble);
        ``client_port`` fixes the first member's port; ``sasl_users``: SASL DIGEST-MD5
        users the servers also accept."""
        root = cache_dir() / "zookeeper" / f"zk-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        ensemble = ZooKeeperEnsemble(root, sasl_users=dict(sasl_users or {}))
        # every member's ports at once: distinct across the ensemble, the caller's aside
        ports = iter(p for p in free_ports(3 * size + 1) if p != client_port)
        for sid in range(1, size + 1):
            data_dir = root / f"member-{sid}"
            data_dir.mkdir(parents=True)
            (data_dir / "myid").write_text(f"{sid}\n")
            port, peer_port, election_port = next(ports), next(ports), next(ports)
            if client_port and sid == 1:
                port = client_port
            ensemble.members.append(Member(sid, port, peer_port, election_port, data_dir))
        for m in ensemble.members:
            ensemble._write_config(m)
        for m in ensemble.members:
            ensemble.start_member(m.sid, wait=False)
        try:
            ensemble.wait_serving(timeout_s)
        except BaseException:
            ensemble.stop()
            raise
        return ensemble

    def _write_config(self, m: Member) -> None:
        lines = [
            "tickTime=200", "initLimit=50", "syncLimit=25",
            "minSessionTimeout=400", "maxSessionTimeout=60000",
            f"dataDir={m.data_dir}", f"clientPort={m.client_port}",
            "clientPortAddress=127.0.0.1", "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr",
            "maxClientCnxns=0", "autopurge.purgeInterval=0",
        ]
        if len(self.members) > 1:
            lines += [f"server.{o.sid}=127.0.0.1:{o.peer_port}:{o.election_port}"
                      for o in self.members]
        if self.sasl_users:
            lines.append("authProvider.1=org.apache.zookeeper.server.auth."
                         "SASLAuthenticationProvider")
            users = "".join(f'    user_{name}="{password}"\n'
                            for name, password in sorted(self.sasl_users.items()))
            (m.data_dir / "jaas.conf").write_text(
                "Server {\n    org.apache.zookeeper.server.auth.DigestLoginModule required\n"
                f"{users};\n}};\n")
        (m.data_dir / "zoo.cfg").write_text("\n".join(lines) + "\n")

    def member(self, sid: int) -> Member:
        return next(m for m in self.members if m.sid == sid)

    def start_member(self, sid: int, wait: bool = True, timeout_s: float = 60.0) -> None:
        """Start (or restart) member ``sid``."""
        m = self.member(sid)
        if m.running:
            return
        log = (m.data_dir / "server.log").open("ab")
        m.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-Dzookeeper.jmx.log4j.disable=true",
             *([f"-Djava.security.auth.login.config={m.data_dir / 'jaas.conf'}"]
               if self.sasl_users else []),
             "-cp", _classpath(), MAIN, str(m.data_dir / "zoo.cfg")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        if wait:
            self._wait(m, timeout_s)

    def stop_member(self, sid: int, sig: int = signal.SIGTERM) -> None:
        """Stop member ``sid`` by pid (SIGKILL for a crash)."""
        m = self.member(sid)
        stop_process(m.proc, sig)
        m.proc = None

    def wait_serving(self, timeout_s: float = 60.0) -> None:
        """Wait until every running member serves clients."""
        for m in self.members:
            if m.proc is not None:
                self._wait(m, timeout_s)

    def _wait(self, m: Member, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while m.mode() is None:
            if m.proc is not None and m.proc.poll() is not None:
                log = (m.data_dir / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"ZooKeeper member {m.sid} exited:\n{log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ZooKeeper member {m.sid} did not serve in {timeout_s}s")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop every member and remove the data."""
        for m in self.members:
            self.stop_member(m.sid)
        shutil.rmtree(self.root, ignore_errors=True)
