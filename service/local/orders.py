"""Example data for trying Coxswain locally: the topics the examples read and write, and a
keyed producer of orders (``{"seq": n, "id": ..., "amountCents": a}`` per customer key,
``seq`` counting that customer's orders from 0, so a reader can check per-key order, and
the amount a function of (customer, seq), so a reader can check running totals)."""

from __future__ import annotations

import json
import random
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from common.kafka_clients import Brokers, settings_of

# what `coxswain dev up` creates: the examples' input and the enrich example's output
EXAMPLE_TOPICS: tuple[tuple[str, int], ...] = (("orders", 8), ("orders-enriched", 8))


def amount_cents(key: str, seq: int) -> int:
    """The amount of customer ``key``'s order number ``seq``: 1..10000 cents."""
    return zlib.crc32(f"{key}:{seq}".encode()) % 10_000 + 1


def parse_topic(spec: str) -> tuple[str, int]:
    """``NAME:PARTITIONS`` (or ``NAME``, one partition) as a pair; ValueError when bad."""
    name, _, count = spec.partition(":")
    if not name or (count and not count.isdigit()) or (count and int(count) < 1):
        raise ValueError(f"a topic is NAME or NAME:PARTITIONS (PARTITIONS >= 1), got {spec!r}")
    return name, int(count) if count else 1


def create_topics(bootstrap: Brokers, topics: Sequence[tuple[str, int]],
                  timeout_s: float = 60.0) -> list[str]:
    """Create ``(name, partitions)`` topics (replication 1); existing ones are kept as they
    are. Returns the names created now."""
    # imported here: the CLI imports this module for its constants and stays quick to start
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient(settings_of(bootstrap).client({"log_level": 2}))
    futures = admin.create_topics([NewTopic(name, n, 1) for name, n in topics])
    created = []
    for name, future in futures.items():
        try:
            future.result(timeout_s)
            created.append(name)
        except Exception as e:  # confluent_kafka raises KafkaException wrapping the code
            error = e.args[0] if e.args else None
            if not (isinstance(error, KafkaError)
                    and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
    # The controller has them once the futures resolve, but the broker's metadata may lag:
    # a coordinator started right after would see the topic missing and only look again
    # at its next partition poll (30 s later).
    deadline = time.monotonic() + timeout_s
    while True:
        known = admin.list_topics(timeout=max(1.0, deadline - time.monotonic())).topics
        if all(name in known and len(known[name].partitions) >= n for name, n in topics):
            return created
        if time.monotonic() >= deadline:
            raise TimeoutError(f"topics {[name for name, _ in topics]} not in the broker's "
                               f"metadata within {timeout_s:.0f}s")
        time.sleep(0.1)


def produce_orders(bootstrap: Brokers, topic: str, rate: float, keys: int,
                   keep_going: Callable[[], bool],
                   on_delivery: Callable[[object, object], None] | None = None,
                   count: int | None = None, seed: int = 7) -> int:
    """Produce keyed orders at ``rate`` per second over ``keys`` customers while
    ``keep_going()`` (and until ``count`` when given); flush and return how many were
    handed to the producer. librdkafka's default partitioner (CRC-32 of the key), as a
    Python user's producer has it: a job's key hash (xxhash64) is independent of it."""
    from confluent_kafka import Producer

    producer = Producer(settings_of(bootstrap).client({"linger.ms": 20, "log_level": 2}))

    def send(orders: list[tuple[str, bytes]]) -> None:
        for key, value in orders:
            producer.produce(topic, key=key.encode(), value=value, on_delivery=on_delivery)
        producer.poll(0)

    sent = _produce(send, rate, keys, keep_going, count, seed)
    producer.flush(30)
    return sent


def produce_orders_to_kinesis(endpoint: str | None, region: str | None, stream: str,
                              rate: float, keys: int, keep_going: Callable[[], bool],
                              count: int | None = None, seed: int = 7) -> int:
    """The same orders into a Kinesis stream (PutRecords; the partition key is the
    customer, so Kinesis routes each customer's orders to one shard at a time)."""
    import boto3

    client = boto3.client("kinesis", endpoint_url=endpoint, region_name=region or "us-east-1")

    def send(orders: list[tuple[str, bytes]]) -> None:
        for start in range(0, len(orders), 500):  # PutRecords takes at most 500
            chunk = orders[start:start + 500]
            out = client.put_records(StreamName=stream, Records=[
                {"PartitionKey": key, "Data": value} for key, value in chunk])
            if out.get("FailedRecordCount"):
                raise RuntimeError(f"Kinesis refused {out['FailedRecordCount']} records: "
                                   "rerun slower (--rate) or with more shards")

    return _produce(send, rate, keys, keep_going, count, seed)


def _produce(send: Callable[[list[tuple[str, bytes]]], None], rate: float, keys: int,
             keep_going: Callable[[], bool], count: int | None, seed: int) -> int:
    """Orders (customer key, JSON value with a per-customer sequence number) in bursts
    every 50 ms, at ``rate`` per second; how many were sent."""
    rng = random.Random(seed)
    seq: dict[str, int] = {}
    tick = 0.05
    next_at = time.monotonic()
    sent = 0
    while keep_going() and (count is None or sent < count):
        burst = max(1, round(rate * tick))
        if count is not None:
            burst = min(burst, count - sent)
        orders = []
        for _ in range(burst):
            key = f"customer-{rng.randrange(keys)}"
            n = seq.get(key, 0)
            seq[key] = n + 1
            orders.append((key, json.dumps({"seq": n, "id": uuid.uuid4().hex,
                                            "amountCents": amount_cents(key, n)}).encode()))
        send(orders)
        sent += len(orders)
        next_at += tick
        time.sleep(max(0.0, next_at - time.monotonic()))
    return sent


def read_json_records(bootstrap: Brokers, topic: str, partition: int = 0,
                      idle_s: float = 5.0, stamp: str | None = None
                      ) -> list[dict[str, Any]]:
    """Every record of ``topic``'s ``partition`` from the start, as JSON objects; stops at
    the partition's end (or after ``idle_s`` without a record). How checkers read a job's
    output: as a ``read_committed`` reader (librdkafka's default, said here), up to the
    last stable offset: exactly-once output's aborted transactions are not read, and
    output without transactions is read whole. ``stamp``: a field given each object, the
    record's Kafka timestamp in seconds (when its writer sent it)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(settings_of(bootstrap).client({
        "group.id": uuid.uuid4().hex, "enable.partition.eof": True, "log_level": 2,
        "isolation.level": "read_committed"}))
    consumer.assign([TopicPartition(topic, partition, 0)])
    out: list[dict[str, Any]] = []
    try:
        while True:
            msg = consumer.poll(idle_s)
            if msg is None or msg.error() is not None:  # idle, or the partition's end
                return out
            record = json.loads(msg.value() or b"{}")
            if stamp is not None:
                record[stamp] = msg.timestamp()[1] / 1000
            out.append(record)
    finally:
        consumer.close()
