"""The partitioner models of ``tests/grouping/partitioners.py`` (on which the key hash's
independence tests rest) are what confluent-kafka's producer does: records produced with
each ``partitioner`` setting to a real broker land where the model says."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from service.local.kafka import LocalKafka
from service.local.orders import create_topics
from tests.grouping.partitioners import crc32, fnv1a, java_default

KEYS = [b"", b"a", b"hello", *(f"user-{i}".encode() for i in range(150)),
        *(bytes([i, 255 - i, 7]) for i in range(50))]
MODELS = {"consistent": crc32, "consistent_random": crc32, "murmur2": java_default,
          "murmur2_random": java_default, "fnv1a": fnv1a, "fnv1a_random": fnv1a}


@pytest.mark.parametrize("partitions", [4, 6])
def test_librdkafkas_partitioners_are_modelled(kafka: LocalKafka, partitions: int) -> None:
    topic = f"partitioners-{uuid.uuid4().hex[:8]}"
    create_topics(kafka.bootstrap, [(topic, partitions)])
    for setting in [*MODELS, None]:  # None: the client's default
        producer = Producer({"bootstrap.servers": kafka.bootstrap,
                             **({"partitioner": setting} if setting else {})})
        for k in KEYS:
            producer.produce(topic, key=k, value=(setting or "default").encode())
        assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": topic,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    placed: dict[str, dict[bytes, int]] = {}
    try:
        while sum(map(len, placed.values())) < len(KEYS) * (len(MODELS) + 1):
            m = consumer.poll(10)
            assert m is not None, "records missing"
            assert m.error() is None, m.error()
            value, key, partition = m.value(), m.key(), m.partition()
            assert value is not None and partition is not None
            placed.setdefault(value.decode(), {})[key or b""] = partition
    finally:
        consumer.close()
    for setting, model in {**MODELS, "default": crc32}.items():
        wrong = {k: p for k, p in placed[setting].items()
                 if k != b"" and p != model(k, partitions)}  # (*_random: empty keys random)
        assert not wrong, (setting, list(wrong.items())[:5])
