"""Test-wide settings: hypothesis profiles (COXSWAIN_HYPOTHESIS_PROFILE=thorough for more)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=100, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=3000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("COXSWAIN_HYPOTHESIS_PROFILE", "default"))

# Every JVM the suite starts (ZooKeeper, Kafka, Spark's drivers, masters and workers) lives
# for seconds to minutes and spends much of its CPU compiling code it will not run long
# enough to repay: C1 alone (no C2) cut a worker end-to-end test's CPU by 37% and its time
# by 27% on 2 cores (bench/RESULTS.md). Tests only: long-lived production JVMs want C2,
# and the benches run without it.
QUICK_JIT = "-XX:TieredStopAtLevel=1"
if QUICK_JIT not in os.environ.get("JDK_JAVA_OPTIONS", ""):
    os.environ["JDK_JAVA_OPTIONS"] = " ".join(
        filter(None, [os.environ.get("JDK_JAVA_OPTIONS"), QUICK_JIT]))


# --------------------------------------------------------------------------- services
from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402

from common.kafka_clients import KafkaClientSettings  # noqa: E402
from service.local.kafka import LocalKafka, SaslSsl  # noqa: E402
from service.local.kinesis import LocalKinesis  # noqa: E402
from service.local.s3 import CREDENTIALS, LocalS3  # noqa: E402
from service.local.zookeeper import ZooKeeperEnsemble  # noqa: E402
from tests.infra import background, beside, sigterm  # noqa: E402
from tests.infra.certs import make_certs  # noqa: E402
from tests.infra.postgres import PostgresServer  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    sigterm.install()  # a run stopped by SIGTERM still stops what its tests started


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # the fast tests first, then the end-to-end ones (each keeping its order): a broken
    # unit shows within minutes, and the background jobs below run beside the fast
    # tests, which leave much of the machine idle, not beside the chaos runs' faults
    items.sort(key=lambda item: item.get_closest_marker("slow") is not None)


def pytest_collection_finish(session: pytest.Session) -> None:
    # self-contained slow work (the container images' build, the demo runs) starts now,
    # beside the fast tests; its tests check its results (tests/infra/background.py).
    # And the end-to-end tests marked ``beside`` start in a second pytest process, beside
    # everything else (tests/infra/beside.py); in that process, nothing more starts
    if not beside.in_lane():
        background.start(session, beside.plan(session))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("slow") is not None:
        # never beside the builds' CPU (the ``beside`` tests' process excepted: it is
        # meant to share the machine with the end-to-end tests)
        background.wait(item.config)
    if item.get_closest_marker(beside.ALONE) is not None:
        background.wait_all(item.config)  # the machine to itself: the other lane is done


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = background.summary(terminalreporter.config)
    if lines:
        terminalreporter.section("background jobs")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    background.stop(session)  # a job still running when the run ends (-x, Ctrl-C) stops


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One real PostgreSQL for the whole run, stopped at the end."""
    server = PostgresServer.start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: object) -> str:
    """A fresh database URL, once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/store.db"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.create_database()


ZK_SASL_USER, ZK_SASL_PASSWORD = "coxswain-sasl", "zk-sasl-pw-8c2e0d"


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperEnsemble]:
    """One real single-server ZooKeeper for the whole run, stopped at the end."""
    # also a SASL user (DIGEST-MD5): ZooKeeper auth is tested with both schemes
    ensemble = ZooKeeperEnsemble.start(1, sasl_users={ZK_SASL_USER: ZK_SASL_PASSWORD})
    yield ensemble
    ensemble.stop()


@pytest.fixture(scope="session")
def kafka() -> Iterator[LocalKafka]:
    """One real single-node KRaft Kafka broker for the whole run (tests use their own
    uniquely named topics), stopped by pid at the end."""
    broker = LocalKafka.create().start()
    yield broker
    broker.destroy()


#: the SCRAM identities of the secured broker: its own, and the one Coxswain uses
SCRAM_BROKER = ("broker", "broker-scram-pw-41c9d2")
SCRAM_USER, SCRAM_PASSWORD = "coxswain-test", "scram-pw-7f3a9c1e5b"


@pytest.fixture(scope="session")
def secured_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """A second broker, started by the first test that needs it, as a production
    cluster's: one SASL_SSL listener (SCRAM-SHA-512 credentials added at
    ``kafka-storage format``, a CA and certificate made here with openssl) and no
    plaintext one; stopped by pid at the end."""
    certs = make_certs(tmp_path_factory.mktemp("kafka-tls"))
    broker = LocalKafka.create(sasl_ssl=SaslSsl(
        certs.server_pem(), certs.ca, (SCRAM_BROKER, (SCRAM_USER, SCRAM_PASSWORD)))).start()
    yield broker
    broker.destroy()


@pytest.fixture(scope="session")
def secured_kafka(secured_broker: LocalKafka) -> KafkaClientSettings:
    """Coxswain's client settings for :func:`secured_broker` (librdkafka names), as a
    user of a production cluster has them."""
    assert secured_broker.sasl_ssl is not None
    return secured_broker.sasl_ssl.client(secured_broker.bootstrap, user=1)


@pytest.fixture(scope="session")
def kinesis() -> Iterator[LocalKinesis]:
    """One local Kinesis API server (kinesalite) for the whole run, stopped at the end;
    tests use uniquely named streams."""
    server = LocalKinesis.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[LocalS3]:
    """One real S3 API server (moto's standalone server) for the whole run, stopped at
    the end. Clients get its credentials from the usual AWS variables."""
    server = LocalS3.start()
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    yield server
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.stop()
