"""The coxswain CLI against a running server, db migrations, settings precedence, logs."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator.barrier import Barrier, BarrierState
from service.local.ports import free_ports
from service.logs import JsonFormatter
from service.settings import Settings, SettingsError, parse_input
from tests.service.conftest import StartServer
from tests.service.server import Server
from tests.service.workers import SimWorker, wait_for_version


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service.cli", *args], capture_output=True,
                          text=True, timeout=60, check=False, env=env)


def test_status_processors_and_scale_print_tables(start_server: StartServer) -> None:
    # w1 never heartbeats: a lease outliving the CLI calls (each a Python start, seconds
    # apiece on a loaded machine: a 10 s lease once ran out half way)
    server = start_server("--input", "kafka.orders:4", "--debounce-ms", "50",
                          "--admin-token", "adm", "--worker-token", "wrk",
                          "--lease-ttl-ms", "600000")
    with server.client("wrk") as c:
        SimWorker(c, "w1", "host-a").register()
        wait_for_version(c, 0)
    status = cli("status", "--url", server.url)
    assert status.returncode == 0, status.stderr
    assert "PROCESSOR" in status.stdout and "w1" in status.stdout
    assert "latest version 1" in status.stdout
    processors = cli("processors", "--url", server.url)
    assert "host-a" in processors.stdout
    refused = cli("scale", "4", "--url", server.url, "--token", "wrk")
    assert refused.returncode != 0
    assert "forbidden" in refused.stderr
    scaled = cli("scale", "4", "--url", server.url, "--token", "adm")
    assert scaled.returncode == 0, scaled.stderr
    assert "job model version 2" in scaled.stdout
    bad = cli("scale", "3", "--url", server.url, "--token", "adm")
    assert "invalid_elasticity_factor" in bad.stderr
    as_json = json.loads(cli("status", "--url", server.url, "--json").stdout)
    assert as_json["elasticityFactor"] == 4
    # removing a processor is an operator's call: the worker token is not enough
    refused = cli("processors", "remove", "w1", "--url", server.url, "--token", "wrk")
    assert refused.returncode != 0 and "401" in refused.stderr, refused.stderr
    removed = cli("processors", "remove", "w1", "--url", server.url, "--token", "adm")
    assert removed.returncode == 0, removed.stderr
    assert "w1" not in cli("processors", "--url", server.url).stdout


def test_an_open_deployment_removes_a_processor_without_its_lease_token(
    start_server: StartServer,
) -> None:
    """No tokens (loopback): every caller may act as an operator, as for /scale."""
    server = start_server("--input", "kafka.orders:4", "--debounce-ms", "50",
                          "--lease-ttl-ms", "600000")  # (w1 never heartbeats)
    with server.client() as c:
        SimWorker(c, "w1", "host-a").register()
        wait_for_version(c, 0)
    removed = cli("processors", "remove", "w1", "--url", server.url)
    assert removed.returncode == 0, removed.stderr
    assert "w1 removed" in removed.stdout
    gone = cli("processors", "remove", "w1", "--url", server.url)
    assert gone.returncode != 0 and "unknown_processor" in gone.stderr, gone.stderr
    with server.client() as c:
        assert c.get("/processors").json() == []


def test_a_leave_carrying_another_processors_lease_token_is_fenced_even_when_open(
    start_server: StartServer,
) -> None:
    """An open deployment lets an operator remove a processor without a token, but a
    call that carries a lease token is a processor's: it must be the processor's own."""
    server = start_server("--input", "kafka.orders:4", "--debounce-ms", "50",
                          "--lease-ttl-ms", "600000")
    with server.client() as c:
        w1, w2 = SimWorker(c, "w1", "host-a"), SimWorker(c, "w2", "host-b")
        assert w1.register().status_code == 201 and w2.register().status_code == 201
        wrong = c.delete("/processors/w1", headers=w2.lease)
        assert wrong.status_code == 409 and wrong.json()["error"] == "fenced", wrong.text
        assert {p["processorId"] for p in c.get("/processors").json()} == {"w1", "w2"}
        assert c.delete("/processors/w1", headers=w1.lease).status_code == 204
        assert {p["processorId"] for p in c.get("/processors").json()} == {"w2"}


def test_client_commands_say_when_no_server_answers() -> None:
    result = cli("status", "--url", "http://127.0.0.1:9")
    assert result.returncode != 0
    assert "cannot reach" in result.stderr


def test_client_commands_load_no_settings_machinery() -> None:
    """`coxswain scale` and the other client commands only call the API: loading the
    settings (pydantic-settings, half a second of CPU) made `scale` take 19 s at load
    20, against 0.24 s for the API call itself."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "service.cli", "scale",
                           "2", "--url", "http://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert "cannot reach" in done.stderr
    loaded = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
              if line.startswith("import time:")}
    assert "httpx" in loaded  # (the import log is there)
    assert not {"service.settings", "pydantic_settings", "pyspark"} & loaded


def test_db_upgrade_and_downgrade_commands(tmp_path: Path) -> None:
    up = cli("db", "upgrade", "--data-dir", str(tmp_path))
    assert "revision 0004" in up.stdout, up.stderr
    down = cli("db", "downgrade", "--data-dir", str(tmp_path))
    assert "revision 0003" in down.stdout, down.stderr


def test_settings_precedence_flags_env_file_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("lease-ttl-ms: 5000\ndebounce_ms: 300\ninput: [kafka.a:2]\n")
    monkeypatch.setenv("COXSWAIN_DEBOUNCE_MS", "400")
    s = Settings(config_file=yaml_file)
    assert (s.lease_ttl_ms, s.debounce_ms, s.input) == (5000, 400, ["kafka.a:2"])
    s = Settings(config_file=yaml_file, debounce_ms=500)
    assert s.debounce_ms == 500
    toml_file = tmp_path / "c.toml"
    toml_file.write_text('grouper = "GroupBySystemStreamPartition"\nnum_standbys = 1\n')
    s = Settings(config_file=toml_file)
    assert (s.grouper, s.num_standbys, s.barrier_timeout_ms) == (
        "GroupBySystemStreamPartition", 1, 30_000)


def test_bad_settings_are_refused_with_a_reason(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"SYSTEM\.STREAM:PARTITIONS"):
        parse_input("orders:8")
    with pytest.raises(SettingsError, match="positive integer"):
        parse_input("kafka.orders:0")
    result = cli("serve", "--input", "orders:8", "--data-dir", str(tmp_path))
    assert result.returncode != 0 and "SYSTEM.STREAM:PARTITIONS" in result.stderr
    result = cli("serve", "--input", "kafka.orders", "--data-dir", str(tmp_path))
    assert result.returncode != 0 and "need --kafka-bootstrap" in result.stderr
    result = cli("serve", "--elasticity-factor", "6", "--data-dir", str(tmp_path))
    assert "power of two" in result.stderr
    broken = tmp_path / "broken.toml"
    broken.write_text("this is = = not toml")
    result = cli("serve", "--config", str(broken), "--data-dir", str(tmp_path))
    assert result.returncode != 0 and "not valid" in result.stderr


def test_json_logs_carry_reason_and_version() -> None:
    record = logging.LogRecord("coxswain.coordinator", logging.INFO, __file__, 1,
                               "published job model version %d", (7,), None)
    record.reason = "scale"
    record.version = 7
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "published job model version 7"
    assert (line["reason"], line["version"], line["level"]) == ("scale", 7, "INFO")


def test_barrier_state_machine() -> None:
    b = Barrier(3, BarrierState.PENDING, frozenset({"a", "b"}), frozenset(), 0.0)
    b = b.ack("a", 1.0)
    assert b.state is BarrierState.PENDING and b.silent == {"b"}
    done = b.ack("b", 2.0)
    assert done.state is BarrierState.DONE and done.ended_at == 2.0
    assert done.time_out(3.0) == done
    assert b.time_out(3.0).state is BarrierState.TIMED_OUT
    assert Barrier.from_bytes(done.to_bytes()) == done


def _dev_up(zk_port: int, kafka_port: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "dev", "up", "--zk-port", str(zk_port),
         "--kafka-port", str(kafka_port), *extra], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)


def _banner(proc: subprocess.Popen[str]) -> str:
    """What `dev up` prints until it says how to stop it."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("(Ctrl-C"):
            break
    return "".join(lines)


def _assert_closed(*ports: int) -> None:
    for port in ports:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except OSError:
            continue
        pytest.fail(f"port {port} still answers after `coxswain dev up` exited: a server it "
                    "started outlived it")


def test_dev_up_starts_zookeeper_and_kafka_and_stops_them(tmp_path: Path) -> None:
    zk_port, kafka_port = free_ports(2)
    proc = _dev_up(zk_port, kafka_port)
    try:
        banner = _banner(proc)
        assert f"ZooKeeper: 127.0.0.1:{zk_port}" in banner, banner
        assert "orders (8 partitions)" in banner, banner
        for port in (zk_port, kafka_port):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        _try_what_it_suggests(banner, tmp_path)
    finally:
        # at once after the banner: CI once caught the command between printing it and
        # installing its SIGTERM handler, which killed it and left both servers running
        proc.send_signal(signal.SIGTERM)
        proc.wait(90)
    assert proc.returncode == 0
    _assert_closed(zk_port, kafka_port)


def test_a_dev_up_whose_broker_does_not_start_in_time_keeps_its_log_and_says_what_to_try(
) -> None:
    """The broker's readiness is its own "started" line; one that is not there within
    --start-timeout-s (a JVM needs longer than a second) is stopped, its log kept and
    named, with what to try; nothing is left running."""
    zk_port, kafka_port = free_ports(2)
    proc = _dev_up(zk_port, kafka_port, "--start-timeout-s", "1")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0, out
    assert "Kafka broker did not start within 1s" in out, out
    assert "--start-timeout-s 300" in out, out
    log = Path(out.split("its log: ", 1)[1].split(".log", 1)[0] + ".log")
    try:
        assert log.exists() and log.stat().st_size > 0, out
    finally:
        shutil.rmtree(log.parent, ignore_errors=True)
    _assert_closed(zk_port, kafka_port)


def _try_what_it_suggests(banner: str, tmp_path: Path) -> None:
    """The commands `dev up` prints work as printed: the coordinator finds the example
    topic, and the producer writes into it."""
    suggested = [line.split()[1:] for line in banner.splitlines()
                 if line.startswith("  coxswain ")]
    serve = next(args for args in suggested if args[0] == "serve")
    produce = next(args for args in suggested if args[:2] == ["dev", "produce"])
    server = Server(tmp_path, [*serve[1:], "--debounce-ms", "50"]).start()
    try:
        with server.client() as c:
            w1 = SimWorker(c, "w1", "a")
            w1.register()
            since, containers = 0, dict[str, Any]()
            deadline = time.monotonic() + 30
            while not containers.get("w1", {}).get("tasks") and time.monotonic() < deadline:
                # a first version may precede the registration or the partitions' discovery
                w1.heartbeat()
                model = c.get("/jobmodel", params={"processorId": "w1", "since": since,
                                                   "waitMs": 1000})
                if model.status_code == 200:
                    since, containers = model.json()["version"], model.json()["containers"]
            assert len(containers.get("w1", {}).get("tasks", {})) == 8, (containers,
                                                                         server.log())
    finally:
        server.stop()
    produced = cli(*produce, "--count", "20", "--rate", "200")
    assert produced.returncode == 0, produced.stderr
    assert "produced 20 orders" in produced.stdout


def test_a_stateful_worker_on_a_cluster_master_without_a_blob_store_is_refused() -> None:
    """On a cluster master the executors keep task state and back it up: the default
    blob store (a folder beside the driver's state dir) is out of their reach, so an
    explicit one is required, refused at start (issue #27) before Spark starts or the
    coordinator is called."""
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "worker", "--coordinator",
         "http://127.0.0.1:9", "--app", "tests.worker.apps:count_task", "--api", "task",
         "--output-topic", "out", "--stateful", "--spark-master", "spark://127.0.0.1:7077"],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1, result.stderr
    assert "--stateful on a cluster master (spark://127.0.0.1:7077) needs --blob-store" \
        in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("extra", "refusal"), [
    (("--api", "batch"), "--exactly-once needs --api task and --output-topic"),
    (("--api", "task"), "--exactly-once needs --api task and --output-topic"),
    (("--api", "task", "--output-topic", "out", "--spark-master", "spark://127.0.0.1:7077"),
     "--exactly-once runs on a local Spark master only"),
    (("--api", "task", "--output-topic", "out", "--kafka-reader", "jvm"),
     "--exactly-once runs with --kafka-reader python only"),
])
def test_exactly_once_combinations_not_supported_are_refused_at_start(
    extra: tuple[str, ...], refusal: str,
) -> None:
    """``--exactly-once`` writes process_task's rows itself (so --api task with an output
    topic), and has been run on local masters only: anything else is refused before
    Spark starts or the coordinator is called."""
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "worker", "--coordinator",
         "http://127.0.0.1:9", "--app", "tests.worker.apps:count_task", "--exactly-once",
         *extra], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1, result.stderr
    assert refusal in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_dev_up_stopped_while_starting_stops_what_it_started() -> None:
    zk_port, kafka_port = free_ports(2)
    proc = _dev_up(zk_port, kafka_port)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("starting ZooKeeper"), first
    finally:
        proc.send_signal(signal.SIGTERM)  # while ZooKeeper and Kafka start
        out, _ = proc.communicate(timeout=150)
    assert proc.returncode == 0, out
    assert "stopping..." in out, out
    _assert_closed(zk_port, kafka_port)


def test_kinesis_inputs_are_listed_shards_not_counts() -> None:
    s = Settings(input=["kinesis.orders", "kafka.clicks:4"])  # no --kafka-bootstrap needed
    assert s.shard_streams() == [("kinesis", "orders")]
    assert s.monitored_streams() == []
    with pytest.raises(ValueError, match="its shards"):
        Settings(input=["kinesis.orders:4"])


def test_dev_up_kinesis_serves_a_stream_its_producer_fills(tmp_path: Path) -> None:
    """``dev up --kinesis``: kinesalite with a stream ``orders``; the ``dev produce``
    command it prints writes into it, and the coordinator it suggests lists its shards;
    everything stops on SIGTERM."""
    zk_port, kafka_port, kinesis_port = free_ports(3)
    proc = _dev_up(zk_port, kafka_port, "--kinesis", "--kinesis-port", str(kinesis_port),
                   "--kinesis-shards", "3")
    try:
        banner = _banner(proc)
        endpoint = f"http://127.0.0.1:{kinesis_port}"
        assert f"Kinesis:   {endpoint}" in banner and "3 shards" in banner, banner
        suggested = [line.split() for line in banner.splitlines() if "--kinesis-endpoint"
                     in line and line.startswith("  AWS_")]
        env = dict(kv.split("=", 1) for kv in suggested[0] if "=" in kv and kv[:4] == "AWS_")
        produce = next(a for a in suggested if a[4:6] == ["dev", "produce"])
        out = subprocess.run([sys.executable, "-m", "service.cli", *produce[4:], "--count",
                              "30", "--rate", "300"], capture_output=True, text=True,
                             timeout=120, env={**os.environ, **env}, check=False)
        assert "produced 30 orders" in out.stdout, out.stdout + out.stderr
        serve = next(a for a in suggested if a[4] == "serve")
        server = Server(tmp_path, [*serve[5:], "--debounce-ms", "50"], env).start()
        try:
            with server.client() as c:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    inputs = c.get("/status").json()["monitoredInputs"]
                    if inputs and inputs[0]["state"] == "ok":
                        break
                    time.sleep(0.2)
                assert inputs[0]["observedPartitions"] == 3, inputs
        finally:
            server.stop()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(90)
    assert proc.returncode == 0
    _assert_closed(zk_port, kafka_port, kinesis_port)


@pytest.mark.parametrize(("option", "value", "reason"), [
    ("--trigger-interval-ms", "0", "--trigger-interval-ms must be at least 1"),
    ("--driver-batch-records", "-1", "--driver-batch-records must be 0 (off) or more"),
])
def test_a_trigger_interval_under_a_millisecond_or_a_negative_driver_batch_is_refused(
        option: str, value: str, reason: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "worker", "--coordinator",
         "http://127.0.0.1:9", "--app", "tests.worker.apps:echo_task", "--api", "task",
         option, value],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1, result.stderr
    assert reason in result.stderr
    assert "Traceback" not in result.stderr
