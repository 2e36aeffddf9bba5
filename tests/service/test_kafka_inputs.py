"""Inputs discovered from a real Kafka broker: partition expansion while processors are
registered, a missing topic, a shrunk topic, and the broker restarting mid-run."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions, NewTopic

from service.local.kafka import LocalKafka
from tests.service.conftest import StartServer
from tests.service.workers import SimWorker, ack_all, offsets_for, wait_for_version


def admin(kafka: LocalKafka) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 0})


def create_topic(kafka: LocalKafka, partitions: int) -> str:
    name = f"orders-{uuid.uuid4().hex[:8]}"
    client = admin(kafka)  # keep the client alive until its futures resolve
    for f in client.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(30)
    return name


def eventually(check: Callable[[], Any], timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def monitored(c: httpx.Client) -> dict[str, Any]:
    return dict(c.get("/status").json()["monitoredInputs"][0])


def test_partition_expansion_adds_tasks_and_moves_nothing(
    start_server: StartServer, kafka: LocalKafka
) -> None:
    topic = create_topic(kafka, 4)
    server = start_server("--kafka-bootstrap", kafka.bootstrap, "--input", f"kafka.{topic}",
                          "--partition-poll-interval-ms", "300", "--debounce-ms", "100",
                          "--elasticity-factor", "2")
    with server.client() as c:
        workers = [SimWorker(c, f"w{i}", f"host-{i}") for i in range(2)]
        for w in workers:
            assert w.register().status_code == 201
        # both workers in the model (a first version may have only the first to register)
        model = eventually(lambda: (m := c.get("/jobmodel")).status_code == 200
                           and set(m.json()["containers"]) == {"w0", "w1"} and len(
            [t for w in m.json()["containers"].values() for t in w["tasks"]]) == 8 and m.json())
        ack_all(workers, model["version"])
        owner = {t: pid for pid, cont in model["containers"].items() for t in cont["tasks"]}
        for w in workers:
            tasks = w.tasks(model)
            assert w.commit(model["version"], {n: offsets_for(t, 42)
                                               for n, t in tasks.items()}).status_code == 200
        assert monitored(c)["state"] == "ok" and monitored(c)["partitions"] == 4

        client = admin(kafka)
        for f in client.create_partitions([NewPartitions(topic, 8)]).values():
            f.result(30)
        grown = wait_for_version(c, model["version"], 30_000)
        assert grown["config"]["elasticityFactor"] == 2  # the factor is kept
        owner_after = {t: pid for pid, cont in grown["containers"].items()
                       for t in cont["tasks"]}
        assert len(owner_after) == 16
        assert {t: owner_after[t] for t in owner} == owner  # old tasks did not move
        ack_all(workers, grown["version"])
        cps = c.get("/checkpoints", params={"taskName": sorted(owner_after)}).json()
        offsets = {name: {o["offset"] for o in cp["inputOffsets"]} for name, cp in cps.items()}
        assert all(offsets[t] == {"42"} for t in owner)  # checkpoints untouched
        assert all(offsets[t] == {"earliest"} for t in set(owner_after) - set(owner))
        assert eventually(lambda: monitored(c)["partitions"] == 8)


def test_missing_shrunk_and_unreachable_never_wipe_the_job_model(
    start_server: StartServer, kafka: LocalKafka
) -> None:
    topic = create_topic(kafka, 4)
    server = start_server("--kafka-bootstrap", kafka.bootstrap, "--input", f"kafka.{topic}",
                          "--partition-poll-interval-ms", "300", "--debounce-ms", "100")
    with server.client() as c:
        w = SimWorker(c, "w0", "host-0")
        w.register()
        model = eventually(lambda: (m := c.get("/jobmodel")).status_code == 200
                           and len(m.json()["containers"].get("w0", {}).get("tasks", {})) == 4
                           and m.json())

        client = admin(kafka)
        for f in client.delete_topics([topic]).values():
            f.result(30)
        eventually(lambda: monitored(c)["state"] == "missing")
        assert c.get("/jobmodel").json()["version"] == model["version"]

        eventually(lambda: _create(kafka, topic, 2))
        shrunk = eventually(lambda: monitored(c)["state"] == "shrunk" and monitored(c))
        assert shrunk["partitions"] == 4 and shrunk["observedPartitions"] == 2
        assert "fewer than the job's 4" in shrunk["detail"]
        assert c.get("/jobmodel").json()["version"] == model["version"]

        kafka.stop()
        try:
            down = eventually(lambda: monitored(c)["state"] == "unreachable" and monitored(c))
            assert down["partitions"] == 4
            assert c.get("/jobmodel").json()["version"] == model["version"]
            assert w.heartbeat().status_code == 200  # the coordinator keeps serving
        finally:
            kafka.start()
        eventually(lambda: monitored(c)["state"] == "shrunk")  # reconnected by itself
        assert "Kafka unreachable" in server.log() or "unreachable" in server.log()


def _create(kafka: LocalKafka, topic: str, partitions: int) -> bool:
    # a topic deletion completes asynchronously: creating it again may need a retry
    client = admin(kafka)
    futures = client.create_topics([NewTopic(topic, partitions, 1)])
    try:
        for f in futures.values():
            f.result(30)
    except Exception:
        time.sleep(0.5)
        return False
    return True
