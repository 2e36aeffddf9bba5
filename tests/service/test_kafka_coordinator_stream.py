"""The Kafka coordinator stream as the MetadataStore, on a real broker: a coordinator
restart keeps locality, job models and config; a stale writer is fenced; tombstones
remove keys under compaction."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from coordinator.errors import Fenced
from coordinator.store.kafka import KafkaMetadataStore
from service.local.kafka import LocalKafka
from tests.service.conftest import StartServer
from tests.service.workers import SimWorker, ack_all, wait_for_version


@pytest.mark.parametrize("listener", ["plaintext", "sasl_ssl"])
def test_a_coordinator_restart_on_the_stream_keeps_its_state(
    start_server: StartServer, request: pytest.FixtureRequest, tmp_path: Path, listener: str
) -> None:
    """(On SASL_SSL: the stream's producer, consumers and admin client with the
    settings of ``--kafka-config``, on a broker without a plaintext listener.)"""
    kafka: LocalKafka = request.getfixturevalue(
        "kafka" if listener == "plaintext" else "secured_broker")
    settings = kafka.client_settings()
    secured: list[str] = []
    if settings.secured:
        props = tmp_path / "client.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in settings.options))
        secured = ["--kafka-config", str(props)]
    job = f"job{uuid.uuid4().hex[:8]}"
    args = ("--metadata-store", "kafka", "--kafka-bootstrap", kafka.bootstrap, "--job", job,
            "--input", "kafka.orders:4", "--debounce-ms", "100", "--lease-ttl-ms", "60000",
            *secured)
    server = start_server(*args, data_dir=tmp_path)
    with server.client() as c:
        workers = [SimWorker(c, f"w{i}", f"host-{i}") for i in range(2)]
        for w in workers:
            w.register()
        model = wait_for_version(c, 0)
        while set(model["containers"]) != {"w0", "w1"}:
            model = wait_for_version(c, model["version"])
        ack_all(workers, model["version"])
        assert c.post("/scale", json={"elasticityFactor": 2}).status_code == 202
        scaled = c.get("/jobmodel").json()
        ack_all(workers, scaled["version"])
        before = c.get("/status").json()
    server.kill()

    store = KafkaMetadataStore(settings, job, "inspector")
    store.start()
    try:
        locality = {k: v.value.decode() for k, v in store.list("taskLocality").items()}
        children = {f"Partition {p}_{b}_2" for p in range(4) for b in range(2)}
        assert children <= set(locality)  # (and the parents' from the first version)
        assert set(locality.values()) == {"host-0", "host-1"}
    finally:
        store.close()

    again = start_server(*args, data_dir=tmp_path)
    with again.client() as c:
        after = c.get("/jobmodel").json()
        assert after == {**scaled, "barrier": "done"}  # same latest model, barrier done
        status = c.get("/status").json()
        assert status["elasticityFactor"] == 2  # the desired config survived
        assert status["activeVersion"] == before["activeVersion"]
        assert {p["processorId"] for p in c.get("/processors").json()} == {"w0", "w1"}


def test_a_stale_writer_is_fenced_and_its_late_writes_ignored(kafka: LocalKafka) -> None:
    job = f"job{uuid.uuid4().hex[:8]}"
    old = KafkaMetadataStore(kafka.bootstrap, job, "old")
    old.start()
    old.put("config", "desired", b'{"elasticityFactor": 2}')
    new = KafkaMetadataStore(kafka.bootstrap, job, "new")
    new.start()
    assert new.epoch > old.epoch
    assert new.get("config", "desired") is not None
    deadline = time.monotonic() + 10
    while True:  # the old writer learns of the new epoch by reading it
        try:
            old.put("config", "desired", b'{"elasticityFactor": 64}')
        except Fenced:
            break
        assert time.monotonic() < deadline, "the stale writer was never fenced"
        time.sleep(0.05)
    assert old.compare_and_set("jobModelVersion", "latest", b"9", None) is None
    new.put("config", "desired", b'{"elasticityFactor": 4}')
    old.close()
    new.close()
    replay = KafkaMetadataStore(kafka.bootstrap, job, "replay")
    replay.start()
    found = replay.get("config", "desired")
    assert found is not None and found.value == b'{"elasticityFactor": 4}'
    replay.close()


def test_tombstones_remove_keys_under_compaction(kafka: LocalKafka) -> None:
    job = f"job{uuid.uuid4().hex[:8]}"
    store = KafkaMetadataStore(kafka.bootstrap, job, "w", topic_config={
        "segment.ms": "200", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100"})
    store.start()
    for i in range(20):
        store.put("taskLocality", f"Partition {i}", b"host-a")
    assert store.delete("taskLocality", "Partition 3")
    store.put("taskLocality", "Partition 4", b"host-b")
    store.close()

    def raw_keys() -> list[bytes]:
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": uuid.uuid4().hex,
                             "enable.partition.eof": True, "log_level": 2})
        consumer.assign([TopicPartition(store.topic, 0, 0)])
        keys: list[bytes] = []
        try:
            while True:
                msg = consumer.poll(5)
                if msg is None or msg.error() is not None:
                    return keys
                keys.append(msg.key() or b"")
        finally:
            consumer.close()

    deadline = time.monotonic() + 90
    while True:
        keys = raw_keys()
        if b"taskLocality/Partition 3" not in keys and \
                keys.count(b"taskLocality/Partition 4") == 1:
            break
        if time.monotonic() > deadline:
            pytest.fail(f"not compacted in time: {keys}")
        # compaction only cleans closed segments: a later write rolls the active one
        nudge = KafkaMetadataStore(kafka.bootstrap, job, "nudge")
        nudge.start()
        nudge.close()
        time.sleep(1)
    replay = KafkaMetadataStore(kafka.bootstrap, job, "replay")
    replay.start()
    assert "Partition 3" not in replay.keys("taskLocality")
    assert len(replay.keys("taskLocality")) == 19
    found = replay.get("taskLocality", "Partition 4")
    assert found is not None and (found.value, found.version) == (b"host-b", 2)
    replay.close()


def test_broker_restart_mid_run_the_coordinator_reconnects_and_keeps_serving(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path
) -> None:
    job = f"job{uuid.uuid4().hex[:8]}"
    server = start_server("--metadata-store", "kafka", "--kafka-bootstrap", kafka.bootstrap,
                          "--job", job, "--input", "kafka.orders:4", "--debounce-ms", "100",
                          "--lease-ttl-ms", "60000", data_dir=tmp_path)
    with server.client() as c:
        w0 = SimWorker(c, "w0", "host-0")
        w0.register()
        first = wait_for_version(c, 0)
        kafka.stop()
        try:
            assert c.get("/jobmodel").status_code == 200  # served from memory meanwhile
        finally:
            kafka.start()
        deadline = time.monotonic() + 60
        while w0.heartbeat().status_code != 200:  # writes go through again
            assert time.monotonic() < deadline, "the coordinator did not reconnect"
            time.sleep(0.5)
        w1 = SimWorker(c, "w1", "host-1")
        assert w1.register().status_code == 201
        model = wait_for_version(c, first["version"], 30_000)
        while set(model["containers"]) != {"w0", "w1"}:
            model = wait_for_version(c, model["version"], 30_000)
    # and what was written after the restart is in the stream
    replay = KafkaMetadataStore(kafka.bootstrap, job, "replay")
    replay.start()
    try:
        assert set(replay.keys("processors")) == {"w0", "w1"}
    finally:
        replay.close()


def test_a_fenced_replica_never_tells_live_workers_to_stop(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path
) -> None:
    """During a redeploy the old replica is fenced by the new one's epoch: its answers to
    heartbeats are 409 or 503 (retry elsewhere), never 404 (register again)."""
    job = f"job{uuid.uuid4().hex[:8]}"
    args = ("--metadata-store", "kafka", "--kafka-bootstrap", kafka.bootstrap, "--job", job,
            "--input", "kafka.orders:2", "--debounce-ms", "100", "--lease-ttl-ms", "60000")
    old = start_server(*args, data_dir=tmp_path / "old")
    with old.client() as c:
        w1 = SimWorker(c, "w1", "host-a")
        assert w1.register().status_code == 201
        assert w1.heartbeat().status_code == 200
    new = start_server(*args, data_dir=tmp_path / "new")
    with old.client() as c, new.client() as n:
        assert SimWorker(n, "w1", "host-a").heartbeat().status_code == 200
        statuses: list[int] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and statuses[-3:] != [503, 503, 503]:
            statuses.append(SimWorker(c, "w1", "host-a").heartbeat().status_code)
            time.sleep(0.1)
        assert 404 not in statuses, statuses
        assert statuses[-3:] == [503, 503, 503], statuses
