"""The executor side's Kafka consumers, kept from batch to batch.

A consumer made for every batch's range pays a connection, a metadata request and a
first fetch before its first record: on a small host tens of milliseconds per
partition and batch, on every batch, which is what bounds how short batches can be
(and a handover waits for the batch in flight). Spark reuses a Python worker process
for the tasks of many batches, so the consumers live in that process, one per
(bootstrap, topic, partition), as Spark's own Kafka source keeps its consumers per
executor: a batch that starts where the previous one of its partition ended finds the
records already prefetched; any other start seeks. The pool is bounded (least recently
used closed first) and its consumers' prefetch queues are small.

Nothing is committed and no group is joined: Coxswain's per-bucket checkpoints say where
tasks start.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections import OrderedDict
from typing import Any

from common.kafka_clients import KafkaClientSettings

#: consumers one Python worker keeps (the least recently used beyond is closed)
POOL_SIZE = 32
#: the longest a fetch waits at the broker for records, and a full queue before it is
#: checked again (librdkafka's defaults: 500 and 1000)
FETCH_WAIT_MS = 20


class ConsumerPool:
    """Consumers by (client settings, topic, partition), each positioned where its last read
    ended. One per Python worker process (:func:`pool`)."""

    def __init__(self, size: int = POOL_SIZE) -> None:
        self._size = size
        self._lock = threading.Lock()  # Spark runs one task per worker process; cheap
        self._free: OrderedDict[tuple[KafkaClientSettings, str, int], tuple[Any, int]] = \
            OrderedDict()
        self.created = 0  # consumers made so far (a test reads it)

    def take(self, bootstrap: KafkaClientSettings, topic: str, partition: int, start: int) -> Any:
        """A consumer of the partition assigned from ``start``: a kept one when there
        is (seeking only if its position is elsewhere), else a new one."""
        key = (bootstrap, topic, partition)
        with self._lock:
            found = self._free.pop(key, None)
        if found is not None:
            consumer, position = found
            if position != start:  # assigning again drops what it prefetched
                from confluent_kafka import TopicPartition  # noqa: PLC0415 (executor)

                consumer.assign([TopicPartition(topic, partition, start)])
            return consumer
        return self._new(bootstrap, topic, partition, start)

    def give_back(self, bootstrap: KafkaClientSettings, topic: str, partition: int, consumer: Any,
                  position: int) -> None:
        """Keep ``consumer`` (read up to ``position``) for the partition's next batch."""
        with self._lock:
            old = self._free.pop((bootstrap, topic, partition), None)
            self._free[(bootstrap, topic, partition)] = (consumer, position)
            evicted = [old[0]] if old is not None else []
            while len(self._free) > self._size:
                evicted.append(self._free.popitem(last=False)[1][0])
        for c in evicted:
            c.close()

    def discard(self, consumer: Any) -> None:
        """Close a consumer whose read failed (its position is unknown)."""
        with contextlib.suppress(Exception):  # a broken consumer: nothing more to do
            consumer.close()

    def close(self) -> None:
        with self._lock:
            consumers = [c for c, _ in self._free.values()]
            self._free.clear()
        for c in consumers:
            c.close()

    def _new(self, bootstrap: KafkaClientSettings, topic: str, partition: int, start: int) -> Any:
        from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415 (executor)

        consumer = Consumer(bootstrap.client({
            "group.id": f"coxswain-{uuid.uuid4()}",
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest", "isolation.level": "read_committed",
            # prefetch a batch's worth, not librdkafka's default of 64 MB per partition
            "queued.min.messages": 20_000, "queued.max.messages.kbytes": 16_384,
            # A read from another offset than the consumer's (any Python worker may run
            # a partition's next range) seeks, and its first fetch waits for what holds
            # the partition's fetches: a fetch in flight, which waits at the broker up
            # to fetch.wait.max.ms when the consumer is at the partition's end (500 ms
            # by default), or, when the consumer's queue is full (a backlog), the
            # backoff before the next check of it (1 s by default). Measured: 350-500
            # ms and 1 s per such read, most of a batch's fixed cost. At 20 ms both: a
            # seek's read takes 10-50 ms, and an idle consumer asks 50 times a second
            "fetch.wait.max.ms": FETCH_WAIT_MS, "fetch.queue.backoff.ms": FETCH_WAIT_MS,
            "log_level": 3}))
        consumer.assign([TopicPartition(topic, partition, start)])
        self.created += 1
        return consumer


class _Holder:
    """Holds the process's pool (made on first use, in the executor's Python worker)."""

    pool: ConsumerPool | None = None


def pool() -> ConsumerPool:
    """This Python worker process's consumer pool."""
    if _Holder.pool is None:
        _Holder.pool = ConsumerPool()
    return _Holder.pool
