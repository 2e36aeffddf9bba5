"""Kafka with SASL_SSL for every client (#51), on a broker as a production cluster's: one
SASL_SSL listener (SCRAM-SHA-512 added at ``kafka-storage format``, a certificate from
openssl) and no plaintext one (``secured_broker``). The coordinator discovers partitions
through it (``--kafka-config``); a stateful worker with exactly-once output (its admin
client, executors' consumers, transactional producer and checkpoint log) and a stateless
one on the JVM reader and Spark's Kafka sink run end to end; wrong credentials end a
worker and a coordinator at start with the reason; and no secret shows in a log,
``/status``, ``--help`` or an error."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from common.kafka_clients import KafkaClientSettings
from service.local.kafka import LocalKafka
from tests.conftest import SCRAM_PASSWORD
from tests.service.conftest import StartServer
from tests.worker.test_end_to_end import (
    Producing,
    check_lost_and_order,
    new_topics,
    start_worker,
    stop_workers,
    wait_output,
)
from tests.worker.test_exactly_once_end_to_end import check_exactly_once, wait_committed

pytestmark = pytest.mark.slow

WORKER_TOKEN, ADMIN_TOKEN = "worker-token-5e1d7c0a9b", "admin-token-3f8b2a6c4d"
SECRETS = (SCRAM_PASSWORD, WORKER_TOKEN, ADMIN_TOKEN)


def _properties(path: Path, settings: KafkaClientSettings, **override: str) -> Path:
    """A client.properties as a user keeps one (mode 600), with ``override``."""
    lines = [f"{k}={v}" for k, v in {**dict(settings.options), **override}.items()]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("job", ["stateful-exactly-once", "stateless-jvm-reader",
                                 "stateless-in-driver"])
def test_a_job_on_a_sasl_ssl_only_broker_runs_and_leaks_no_secret(
    start_server: StartServer, secured_broker: LocalKafka,
    secured_kafka: KafkaClientSettings, tmp_path: Path, job: str,
) -> None:
    with pytest.raises(KafkaException):  # the listener wants TLS and SCRAM
        AdminClient({"bootstrap.servers": secured_kafka.bootstrap, "log_level": 0}
                    ).list_topics(timeout=3)
    stateful = job.startswith("stateful")
    topic, output = new_topics(secured_broker, 2)
    producing = Producing(secured_broker, topic)
    producing.send(400)
    (tmp_path / "worker.token").write_text(WORKER_TOKEN + "\n")
    (tmp_path / "admin.token").write_text(ADMIN_TOKEN + "\n")
    # the coordinator: the password in its properties file (mode 600)
    server = start_server(
        "--kafka-bootstrap", secured_kafka.bootstrap, "--input", f"kafka.{topic}",
        "--kafka-config", str(_properties(tmp_path / "coordinator.properties",
                                          secured_kafka)),
        "--worker-token-file", str(tmp_path / "worker.token"),
        "--admin-token-file", str(tmp_path / "admin.token"),
        *(["--stateful"] * stateful), "--elasticity-factor", "2", "--debounce-ms", "300")
    # the worker: its properties file without the password, which is in a file of its own
    (tmp_path / "kafka.pw").write_text(SCRAM_PASSWORD + "\n")
    props = _properties(tmp_path / "worker.properties", secured_kafka,
                        **{"sasl.password": f"${{file:{tmp_path / 'kafka.pw'}}}"})
    # (in-driver: the Python reader and Spark's sink, a trickle's batches run in the
    # driver: its consumers and producer through SASL_SSL too)
    mode = (["--exactly-once", "--stateful", "--state-dir", str(tmp_path / "state")]
            if stateful else ["--kafka-reader", "jvm"] if job == "stateless-jvm-reader"
            else [])
    worker = start_worker(
        tmp_path, server.url, secured_broker, output, "w0", "--api", "task",
        "--output-topic", output, *mode, "--kafka-bootstrap", secured_kafka.bootstrap,
        "--kafka-config", str(props), "--token-file", str(tmp_path / "worker.token"),
        app="tests.worker.apps:" + ("count_task" if stateful else "echo_task"))
    try:
        if stateful:
            wait_committed(secured_broker, output, 400, {"w0": worker}, tmp_path)
            producing.send(200)
            check_exactly_once(wait_committed(secured_broker, output, 600, {"w0": worker},
                                              tmp_path), producing)
        else:
            wait_output(secured_broker, output, 400)
            producing.send(200)
            if job == "stateless-in-driver":
                for _ in range(8):  # a record a batch
                    producing.send(1)
                    time.sleep(0.4)
            check_lost_and_order(wait_output(secured_broker, output, producing.total),
                                 producing)
        with server.client(ADMIN_TOKEN) as c:
            status = c.get("/status").text
    finally:
        stop_workers([worker])
    outputs = {"worker log": (tmp_path / "w0.log").read_text(),
               "coordinator log": server.log(), "/status": status}
    for where, text in outputs.items():
        assert not [s for s in SECRETS if s in text], f"a secret in the {where}"
    assert "input partitions changed" in server.log()  # discovered through SASL_SSL
    if job == "stateless-in-driver":
        assert "in the driver" in outputs["worker log"], outputs["worker log"][-3000:]


def test_wrong_credentials_end_a_worker_and_a_coordinator_at_start(
    start_server: StartServer, secured_kafka: KafkaClientSettings, tmp_path: Path,
) -> None:
    wrong = _properties(tmp_path / "wrong.properties", secured_kafka,
                        **{"sasl.password": "not-the-password"})
    started = time.monotonic()
    worker = subprocess.run(
        [sys.executable, "-m", "service.cli", "worker", "--app", "tests.worker.apps:echo_task",
         "--api", "task", "--kafka-bootstrap", secured_kafka.bootstrap,
         "--kafka-config", str(wrong), "--coordinator", "http://127.0.0.1:9"],
        capture_output=True, text=True, timeout=120, check=False)
    assert worker.returncode != 0
    assert "refused the client's credentials" in worker.stderr, worker.stderr
    assert "Traceback" not in worker.stderr and len(worker.stderr.splitlines()) < 5
    assert time.monotonic() - started < 60
    server = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--port", "0",
         "--data-dir", str(tmp_path / "data"), "--kafka-bootstrap", secured_kafka.bootstrap,
         "--kafka-config", str(wrong), "--input", "kafka.anything"],
        capture_output=True, text=True, timeout=120, check=False)
    assert server.returncode != 0
    assert "refused the client's credentials" in server.stderr, server.stderr[-2000:]
    assert "Traceback" not in server.stderr


def test_a_secret_on_the_command_line_is_refused_or_warned_about(
    start_server: StartServer, tmp_path: Path,
) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "service.cli", "worker", "--app", "tests.worker.apps:echo_task",
         "--kafka-option", "security.protocol=SASL_SSL",
         "--kafka-option", f"sasl.password={SCRAM_PASSWORD}"],
        capture_output=True, text=True, timeout=120, check=False)
    assert refused.returncode != 0
    assert "visible to every user" in refused.stderr and "${env:NAME}" in refused.stderr
    assert SCRAM_PASSWORD not in refused.stdout + refused.stderr
    typo = subprocess.run(
        [sys.executable, "-m", "service.cli", "worker", "--app", "tests.worker.apps:echo_task",
         "--kafka-option", "securty.protocol=SASL_SSL"],
        capture_output=True, text=True, timeout=120, check=False)
    assert typo.returncode != 0 and "securty.protocol" in typo.stderr, typo.stderr
    # a token in argv works, with a warning naming the safer way
    server = start_server("--admin-token", ADMIN_TOKEN, "--worker-token", WORKER_TOKEN)
    assert "--admin-token-file" in server.log() and ADMIN_TOKEN not in server.log()
    status = subprocess.run(
        [sys.executable, "-m", "service.cli", "status", "--url", server.url,
         "--token", ADMIN_TOKEN, "--json"],
        capture_output=True, text=True, timeout=60, check=False)
    assert status.returncode == 0, status.stderr
    assert "--token-file" in status.stderr and ADMIN_TOKEN not in status.stderr
    (tmp_path / "token").write_text(ADMIN_TOKEN)
    quiet = subprocess.run(
        [sys.executable, "-m", "service.cli", "status", "--url", server.url,
         "--token-file", str(tmp_path / "token"), "--json"],
        capture_output=True, text=True, timeout=60, check=False)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    for command in ("autosize", "status", "worker", "serve"):
        helped = subprocess.run(
            [sys.executable, "-m", "service.cli", command, "--help"], capture_output=True,
            text=True, timeout=60, check=False,
            env={"COXSWAIN_TOKEN": ADMIN_TOKEN, "COXSWAIN_WORKER_TOKEN": WORKER_TOKEN,
                 "COXSWAIN_ADMIN_TOKEN": ADMIN_TOKEN, "PATH": "/usr/bin:/bin"})
        assert helped.returncode == 0, helped.stderr
        assert not [s for s in SECRETS if s in helped.stdout], command


def test_a_secured_broker_that_does_not_answer_ends_a_worker_once_at_start(
    secured_kafka: KafkaClientSettings, tmp_path: Path,
) -> None:
    """Secured settings are probed before anything starts: a worker refuses a broker
    that does not answer in one line (no "going on" warning, no second wait)."""
    config = _properties(tmp_path / "client.properties", secured_kafka)
    worker = subprocess.run(
        [sys.executable, "-m", "service.cli", "worker", "--app", "tests.worker.apps:echo_task",
         "--api", "task", "--kafka-bootstrap", "127.0.0.1:9", "--kafka-config", str(config),
         "--coordinator", "http://127.0.0.1:9"],
        capture_output=True, text=True, timeout=120, check=False)
    assert worker.returncode == 1, worker.stderr
    assert "the Kafka broker at 127.0.0.1:9 did not answer" in worker.stderr, worker.stderr
    assert "going on" not in worker.stderr and "Traceback" not in worker.stderr
    assert worker.stderr.count("did not answer") == 1, worker.stderr
