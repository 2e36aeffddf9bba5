"""A local single-node Apache Kafka broker (KRaft, combined broker + controller) for tests
and ``coxswain dev up``, run from jars fetched from Maven Central.

The jars: ``deploy/local/kafka/pom.xml`` lists only the broker (``kafka_2.13``) and a
logger; ``mvn dependency:copy-dependencies`` copies its runtime closure into
``.cache/kafka/{version}/libs`` once (Maven's own repository also under ``.cache/m2``).
The broker: a ``server.properties`` with test-friendly settings (replication factor 1,
no initial rebalance delay, no topic auto-creation), storage formatted with
``kafka.tools.StorageTool``, then ``kafka.Kafka`` on a loopback port, waited for until an
AdminClient answers, and stopped by pid (SIGTERM: a controlled shutdown).
"""

from __future__ import annotations

import base64
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from common.kafka_clients import KafkaClientSettings, plain
from common.paths import cache_dir
from service.local.ports import free_ports, stop_process

KAFKA_VERSION = "3.9.1"
POM = Path(__file__).resolve().parents[2] / "deploy" / "local" / "kafka" / "pom.xml"


def fetch_jars(version: str = KAFKA_VERSION) -> Path:
    """The broker's jars, downloaded with Maven on first use; returns their folder."""
    libs = cache_dir() / "kafka" / version / "libs"
    done = libs / ".complete"
    if done.exists():
        return libs
    if shutil.which("mvn") is None:
        raise RuntimeError("Maven (mvn) is needed to fetch the Kafka broker jars: "
                           "apt-get install maven")
    if not POM.exists():
        raise RuntimeError(f"{POM} not found: run from a Coxswain checkout")
    libs.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(POM), f"-Dkafka.version={version}",
         f"-Dmaven.repo.local={cache_dir() / 'm2'}", "dependency:copy-dependencies",
         f"-DoutputDirectory={libs}", "-DincludeScope=runtime"],
        capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"fetching the Kafka jars failed:\n{result.stdout}{result.stderr}")
    done.write_text(version + "\n")
    return libs


def random_cluster_id() -> str:
    """A KRaft cluster id as `kafka-storage.sh random-uuid` prints it, without a JVM start.

    Like Kafka's ``Uuid.randomUuid`` it never starts with ``-``: the storage tool's argument
    parser would take such an id for an option.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


# Kafka's SocketServer: "Socket server failed to bind to 127.0.0.1:9092: Address already..."
_BIND_FAILED = re.compile(r"failed to bind to [^\s:]+:(\d+)")


#: the line a KRaft broker logs once its listeners serve ("[KafkaRaftServer nodeId=1]
#: Kafka Server started")
STARTED = b"Kafka Server started"


class BrokerStartTimeout(RuntimeError):
    """The broker did not start in time; it was stopped, its folder and log kept."""


class _BindFailed(Exception):
    """The broker exited because ``port`` was taken."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.port = port


def exit_reason(log: str, errors: int = 5, tail: int = 1500) -> str:
    """Why a broker exited, from its log: its first ERROR/FATAL lines (the cause; the tail
    alone shows only the shutdown that follows it) and then the tail."""
    first = [line for line in log.splitlines() if " ERROR " in line or " FATAL " in line]
    cause = "\n".join(first[:errors]) or "(no ERROR line)"
    return f"{cause}\n...\n{log[-tail:]}"


@dataclass(frozen=True)
class SaslSsl:
    """A broker as a production cluster's: its one listener wants TLS and SASL/SCRAM (no
    plaintext listener; the brokers talk to each other through it too). The broker's key
    and certificate chain in one PEM file, the CA clients trust, and the SCRAM users
    (name, password) added when the storage is formatted (KRaft has no ZooKeeper to add
    them to later); the first is the broker's own identity."""

    keystore_pem: Path
    ca: Path
    users: tuple[tuple[str, str], ...]
    mechanism: str = "SCRAM-SHA-512"

    def client(self, bootstrap: str, user: int = 0) -> KafkaClientSettings:
        """Client settings (librdkafka names) of the ``user``-th identity."""
        name, password = self.users[user]
        return KafkaClientSettings(bootstrap, tuple(sorted({
            "security.protocol": "SASL_SSL", "sasl.mechanism": self.mechanism,
            "sasl.username": name, "sasl.password": password,
            "ssl.ca.location": str(self.ca)}.items())))


@dataclass
class LocalKafka:
    """One KRaft broker+controller on loopback, with its data in ``data_dir``."""

    data_dir: Path
    port: int
    controller_port: int
    port_given: bool = False  # the caller's port: never replaced by another
    proc: subprocess.Popen[bytes] | None = None
    log_start: int = 0  # where this start's lines begin in server.log (it appends)
    sasl_ssl: SaslSsl | None = None  # its listener's security (None: PLAINTEXT)

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` for clients."""
        return f"127.0.0.1:{self.port}"

    def client_settings(self) -> KafkaClientSettings:
        """What a client needs to reach this broker."""
        return (plain(self.bootstrap) if self.sasl_ssl is None
                else self.sasl_ssl.client(self.bootstrap))

    @staticmethod
    def create(data_dir: Path | None = None, port: int | None = None,
               sasl_ssl: SaslSsl | None = None) -> LocalKafka:
        """Configure and format a broker (not started)."""
        libs = fetch_jars()
        root = data_dir or cache_dir() / "kafka" / "brokers" / uuid.uuid4().hex[:8]
        root.mkdir(parents=True, exist_ok=True)
        broker_port, *others = [p for p in free_ports(3) if p != port]
        kafka = LocalKafka(root, port or broker_port, others[0], port_given=port is not None,
                           sasl_ssl=sasl_ssl)
        kafka._write_properties()
        if not (root / "logs" / "meta.properties").exists():
            scram = [] if sasl_ssl is None else [
                arg for name, password in sasl_ssl.users
                for arg in ("--add-scram",
                            f"{sasl_ssl.mechanism}=[name={name},password={password}]")]
            kafka._java("kafka.tools.StorageTool", "format", f"--cluster-id={random_cluster_id()}",
                        "-c", str(root / "server.properties"), "--ignore-formatted", *scram,
                        libs=libs)
        return kafka

    def _listener_lines(self) -> list[str]:
        """The client listener: PLAINTEXT, or SASL_SSL for clients and brokers alike."""
        address = f"127.0.0.1:{self.port}"
        controller = f"CONTROLLER://127.0.0.1:{self.controller_port}"
        if self.sasl_ssl is None:
            return [f"listeners=PLAINTEXT://{address},{controller}",
                    f"advertised.listeners=PLAINTEXT://{address}",
                    "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"]
        secured = self.sasl_ssl
        name, password = secured.users[0]
        prefix = f"listener.name.sasl_ssl.{secured.mechanism.lower()}"
        return [f"listeners=SASL_SSL://{address},{controller}",
                f"advertised.listeners=SASL_SSL://{address}",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
                "inter.broker.listener.name=SASL_SSL",
                f"sasl.enabled.mechanisms={secured.mechanism}",
                f"sasl.mechanism.inter.broker.protocol={secured.mechanism}",
                f"{prefix}.sasl.jaas.config=org.apache.kafka.common.security.scram."
                f'ScramLoginModule required username="{name}" password="{password}";',
                "ssl.keystore.type=PEM", f"ssl.keystore.location={secured.keystore_pem}",
                "ssl.truststore.type=PEM", f"ssl.truststore.location={secured.ca}"]

    def _write_properties(self) -> None:
        root = self.data_dir
        (root / "server.properties").write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            *self._listener_lines(),
            "controller.listener.names=CONTROLLER",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            f"log.dirs={root / 'logs'}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
            "num.recovery.threads.per.data.dir=1",
            # compaction is exercised by tests: let it run soon after a segment rolls
            "log.cleaner.backoff.ms=500",
            "",
        ]))

    def _java(self, main: str, *args: str, libs: Path) -> str:
        result = subprocess.run(
            ["java", "-Xmx256m", "-cp", f"{libs}/*", main, *args],
            capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{main} {' '.join(args)} failed:\n{result.stdout}"
                               f"{result.stderr}")
        return result.stdout

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout_s: float = 60.0) -> LocalKafka:
        """Start the broker and wait until it serves metadata.

        A port this broker picked itself that another process took before the broker
        bound it (between :func:`free_ports` and the bind) is picked again, twice at most.
        """
        if self.running:
            return self
        for attempt in range(3):
            self._launch()
            try:
                self._wait(timeout_s)
                return self
            except _BindFailed as failed:
                ours = {self.controller_port} | (set() if self.port_given else {self.port})
                if failed.port not in ours or attempt == 2:
                    raise RuntimeError(f"Kafka broker could not bind 127.0.0.1:{failed.port}: "
                                       "another process listens there") from None
                picked = iter(p for p in free_ports(3) if p != self.port)
                self.controller_port = next(picked)
                if not self.port_given:
                    self.port = next(picked)
                self._write_properties()
            except BaseException:  # interrupted (Ctrl-C, SIGTERM): nothing left running
                self.stop()
                raise
        raise AssertionError("unreachable")

    def _launch(self) -> None:
        libs = fetch_jars()
        log = (self.data_dir / "server.log").open("ab")
        self.log_start = log.tell()
        self.proc = subprocess.Popen(
            ["java", "-Xmx512m", "-Xms256m", "-XX:+UseSerialGC",
             f"-Dkafka.logs.dir={self.data_dir}", "-cp", f"{libs}/*", "kafka.Kafka",
             str(self.data_dir / "server.properties")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        (self.data_dir / "broker.pid").write_text(f"{self.proc.pid}\n")

    def _wait(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                with (self.data_dir / "server.log").open("rb") as f:
                    f.seek(self.log_start)
                    log = f.read().decode(errors="replace")
                self.proc = None
                bind = _BIND_FAILED.search(log)
                if bind:
                    raise _BindFailed(int(bind.group(1)))
                raise RuntimeError(f"Kafka broker exited:\n{exit_reason(log)}")
            if time.monotonic() > deadline:
                self.stop()  # (its folder and log stay, for a look)
                raise BrokerStartTimeout(
                    f"Kafka broker did not start within {timeout_s:.0f}s (a busy machine "
                    f"starts it slower); its log: {self.data_dir / 'server.log'}")
            if not self._says_started():  # the broker's own signal, then a client's look
                time.sleep(0.1)
                continue
            try:  # the port first: a client would log every refused connection
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
            except OSError:
                time.sleep(0.1)
                continue
            try:
                AdminClient(self.client_settings().client({"log_level": 0})) \
                    .list_topics(timeout=2.0)
                return
            except Exception:
                time.sleep(0.1)

    def _says_started(self) -> bool:
        """Whether this start's log has the broker's "Kafka Server started" line."""
        try:
            with (self.data_dir / "server.log").open("rb") as f:
                f.seek(self.log_start)
                return STARTED in f.read()
        except OSError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the broker by pid (SIGKILL for a crash); the data stays."""
        stop_process(self.proc, sig, grace_s=30)
        self.proc = None

    def destroy(self) -> None:
        """Stop and remove the data."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)
