"""Exactly-once output's fencing on a real coordinator and a real broker: w2 committed a
batch (output and checkpoint record in one transaction) and went silent before posting
its checkpoint, with a second batch's transaction still open; the version without w2
lists it, and w1, before acking, fences w2 (the open transaction aborted, every later
commit of w2 refused) and posts w2's last committed checkpoint, so w2's tasks start
after exactly the output that is visible."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from service.local.kafka import LocalKafka
from service.local.orders import create_topics
from tests.service.conftest import StartServer
from tests.service.workers import SimWorker, ack_all, offsets_for, wait_for_version
from tests.worker.test_transactions import committed
from worker.client import CoordinatorClient
from worker.output.exactly_once import ExactlyOnce, Fencing, ensure_log_topic, latest_records
from worker.output.transactions import CheckpointRecord, Fenced, TransactionalOutput


def test_the_latest_record_of_each_id_wins() -> None:
    records = [CheckpointRecord(1, "a", 1, {"T": 1}), CheckpointRecord(2, "b", 1, {"U": 1}),
               CheckpointRecord(3, "a", 2, {"T": 2})]
    assert latest_records(records) == {"a": records[2], "b": records[1]}


def test_a_removed_processor_is_fenced_and_its_unposted_checkpoint_recovered_before_the_ack(
    start_server: StartServer, kafka: LocalKafka,
) -> None:
    eo = ExactlyOnce.for_output(kafka.bootstrap, f"out-{uuid.uuid4().hex[:8]}")
    create_topics(kafka.bootstrap, [(eo.output_topic, 1)])
    ensure_log_topic(eo)
    ensure_log_topic(eo)  # idempotent
    server = start_server("--input", "kafka.orders:2", "--debounce-ms", "50",
                          "--lease-ttl-ms", "60000", "--barrier-timeout-ms", "60000")
    with server.client() as c:
        w1, w2 = SimWorker(c, "w1", "host-a"), SimWorker(c, "w2", "host-b")
        w1.register()
        w2.register()
        m1 = wait_for_version(c, 0)
        while set(m1["containers"]) != {"w1", "w2"}:
            m1 = wait_for_version(c, m1["version"])
        assert ack_all([w1, w2], m1["version"]) == "done"
        task, t = next(iter(m1["containers"]["w2"]["tasks"].items()))
        assert w2.commit(m1["version"], {task: offsets_for(t, 5)}).status_code == 200

        w2_out = TransactionalOutput(eo.bootstrap, eo.transactional_id("w2"),
                                     eo.output_topic, eo.log_topic).start()
        # batch 1: committed with its checkpoint record, never posted (w2 stalls here)
        w2_out.write([(b"k", b"batch 1")], m1["version"], {task: offsets_for(t, 10)})
        # batch 2: output written, its transaction open, when w2 is removed and fenced
        fenced_midway: list[str] = []

        def second_batch() -> Iterator[tuple[bytes, bytes]]:
            yield b"k", b"batch 2"
            assert w2.leave().status_code == 204
            m2 = wait_for_version(c, m1["version"])
            assert m2["config"]["fencedProcessors"] == ["w2"]
            client = CoordinatorClient(server.url)  # w1's (a listed processor needs no lease)
            Fencing(eo, client).before_ack(m2)  # what w1 does before acking m2
            fenced_midway.append("w2")
            assert ack_all([w1], m2["version"]) == "done"
            yield b"k", b"batch 2, after the fence"

        with pytest.raises(Fenced):
            w2_out.write(second_batch(), m1["version"], {task: offsets_for(t, 20)})
        w2_out.close()
        assert fenced_midway == ["w2"]
        assert committed(kafka, eo.output_topic, 1) == [b"batch 1"]
        starts = c.get("/checkpoints", params={"taskName": task}).json()
        # w2's task starts right after its last visible output: its unposted checkpoint
        assert starts[task]["inputOffsets"][0]["offset"] == "10"
