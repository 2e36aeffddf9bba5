"""The Kafka side of exactly-once output on a real broker: a batch's output and its
checkpoint record commit together or not at all, a fenced incarnation can never commit
again (its open transaction aborted, not timed out), and the checkpoint log read after
a fence holds exactly what the fenced incarnation committed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from service.local.kafka import LocalKafka
from service.local.orders import create_topics
from worker.output.transactions import (
    Fenced,
    TransactionalOutput,
    fence,
    read_log,
    transactional_id,
)


def topics(kafka: LocalKafka) -> tuple[str, str]:
    output, log_topic = f"out-{uuid.uuid4().hex[:8]}", f"log-{uuid.uuid4().hex[:8]}"
    create_topics(kafka.bootstrap, [(output, 2), (log_topic, 1)])
    return output, log_topic


def committed(kafka: LocalKafka, topic: str, partitions: int) -> list[bytes]:
    """Every value a read_committed reader finds in ``topic``."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "t",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    values: list[bytes] = []
    try:
        ends = {p: end for p in range(partitions) if (end := consumer.get_watermark_offsets(
            TopicPartition(topic, p), cached=False)[1]) > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        while any(consumer.position([TopicPartition(topic, p)])[0].offset < end
                  for p, end in ends.items()):
            for msg in consumer.consume(100, 0.5):
                assert msg.error() is None, msg.error()
                values.append(msg.value() or b"")
    finally:
        consumer.close()
    return values


def test_a_batch_and_its_checkpoint_record_commit_together(kafka: LocalKafka) -> None:
    output, log_topic = topics(kafka)
    tid = transactional_id(f"job-{uuid.uuid4().hex[:8]}", "w0")
    out = TransactionalOutput(kafka.bootstrap, tid, output, log_topic).start()
    try:
        first = out.write([(b"k%d" % i, b"v%d" % i) for i in range(500)], 3,
                          {"Partition 0": {"inputOffsets": [{"offset": "500"}]}})
        second = out.write([(b"k", b"last")], 4, {"Partition 0": {"inputOffsets": []}})
    finally:
        out.close()
    assert second > first
    values = committed(kafka, output, 2)
    assert sorted(values) == sorted([b"v%d" % i for i in range(500)] + [b"last"])
    records = read_log(kafka.bootstrap, log_topic, {tid})
    assert [(r.offset, r.version) for r in records] == [(first, 3), (second, 4)]
    assert records[0].checkpoints == {"Partition 0": {"inputOffsets": [{"offset": "500"}]}}
    assert read_log(kafka.bootstrap, log_topic, {tid}, from_offset=first + 1) == records[1:]
    assert read_log(kafka.bootstrap, log_topic, {"someone else"}) == []


def test_a_fenced_incarnation_cannot_commit_and_its_open_transaction_is_aborted(
    kafka: LocalKafka,
) -> None:
    output, log_topic = topics(kafka)
    tid = transactional_id(f"job-{uuid.uuid4().hex[:8]}", "w1")
    zombie = TransactionalOutput(kafka.bootstrap, tid, output, log_topic).start()

    def fenced_mid_batch() -> Iterator[tuple[bytes, bytes]]:
        yield b"a", b"never visible"  # written, not committed, when the fence comes
        fence(kafka.bootstrap, [tid])
        yield b"a", b"never visible either"

    try:
        done = zombie.write([(b"a", b"committed before the fence")], 1, {"T": {"n": 1}})
        with pytest.raises(Fenced):
            zombie.write(fenced_mid_batch(), 2, {"T": {"n": 2}})
    finally:
        zombie.close()
    with pytest.raises(Fenced):  # and a whole batch afterwards, likewise
        zombie.write([(b"a", b"after the fence")], 2, {"T": {"n": 2}})
    assert committed(kafka, output, 2) == [b"committed before the fence"]
    records = read_log(kafka.bootstrap, log_topic, {tid})
    assert [(r.offset, r.version, r.checkpoints) for r in records] == [
        (done, 1, {"T": {"n": 1}})]
    # the successor owning the id again writes, and a reader sees both in order
    successor = TransactionalOutput(kafka.bootstrap, tid, output, log_topic).start()
    try:
        successor.write([(b"a", b"successor")], 3, {"T": {"n": 3}})
    finally:
        successor.close()
    assert committed(kafka, output, 2) == [b"committed before the fence", b"successor"]
    assert [json.loads(json.dumps(r.checkpoints)) for r in read_log(
        kafka.bootstrap, log_topic, {tid})] == [{"T": {"n": 1}}, {"T": {"n": 3}}]
