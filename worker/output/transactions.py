"""Exactly-once output's Kafka side (#28, docs/architecture.md "Exactly-once output"): a
worker incarnation's transactional producer writes a batch's output and its checkpoint
record in one transaction, whose commit is the commit point; ``fence`` ends another
incarnation's ability to write (its open transaction aborted, its next call failing);
``read_log`` reads what fenced incarnations committed to the checkpoint log.

Fencing rests on Kafka's producer epochs, not on time: ``init_transactions`` with an id
bumps its epoch, and the broker refuses every later write or commit of an older epoch.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from common.kafka_clients import Brokers, settings_of

log = logging.getLogger("coxswain.worker")

#: the checkpoint log has one partition: a reader after a fence reads it to the end once
LOG_PARTITION = 0


class Fenced(Exception):
    """This incarnation's transactional id was taken over (``init_transactions`` by
    another worker fencing it): it must drop its tasks and register again."""


class TransactionFailed(Exception):
    """The transaction was aborted (nothing of it is visible); the batch may be written
    again by this producer."""


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """One committed checkpoint record of the log."""

    offset: int
    transactional_id: str
    version: int
    checkpoints: dict[str, Any]


def transactional_id(job: str, processor_id: str) -> str:
    """A processor's transactional id, the same for each of its incarnations: the next
    one fences the one before as it starts (``init_transactions``)."""
    return f"coxswain.{job}.{processor_id}"


def _fenced(e: KafkaException) -> bool:
    err = e.args[0] if e.args else None
    return isinstance(err, KafkaError) and (
        err.fatal() or err.code() in (KafkaError._FENCED, KafkaError._FATAL,
                                      KafkaError.PRODUCER_FENCED,
                                      KafkaError.INVALID_PRODUCER_EPOCH))


class TransactionalOutput:
    """Batches' output and checkpoint records in one transaction each."""

    def __init__(self, bootstrap: Brokers, transactional_id: str, output_topic: str,
                 log_topic: str, *, timeout_s: float = 30.0,
                 config: dict[str, Any] | None = None) -> None:
        self.transactional_id = transactional_id
        self._output = output_topic
        self._log = log_topic
        self._timeout_s = timeout_s
        self._producer = Producer(settings_of(bootstrap).client({
            "transactional.id": transactional_id,
            # a batch's output is written in one go: queue it whole rather than block
            "queue.buffering.max.messages": 1_000_000, "linger.ms": 5,
            # a key's partition as Spark's Kafka sink (Java's) picks it: the output is
            # partitioned alike with and without --exactly-once
            "partitioner": "murmur2_random",
            **(config or {})}))
        self._started = False
        self._dead: str | None = None  # why, once fenced: every later call fails so

    def start(self) -> TransactionalOutput:
        """Take the id over (fencing any other producer holding it)."""
        try:
            self._producer.init_transactions(self._timeout_s)
        except KafkaException as e:
            if _fenced(e):
                raise self._fence(e) from e
            raise
        self._started = True
        return self

    def write(self, rows: Iterable[tuple[bytes | None, bytes | None]], version: int,
              checkpoints: dict[str, Any]) -> int:
        """Write ``rows`` (key, value) to the output topic and the checkpoint record to
        the log, in one committed transaction; the record's log offset. Raises
        :class:`Fenced` (nothing committed, never will be) or
        :class:`TransactionFailed` (aborted: nothing of it visible)."""
        assert self._started, "start() first"
        if self._dead is not None:
            raise Fenced(self._dead)
        record_offset: list[int] = []

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                record_offset.append(int(msg.offset()))

        try:
            self._producer.begin_transaction()
            for key, value in rows:
                self._produce(self._output, key, value)
            self._produce(self._log, self.transactional_id.encode(), json.dumps({
                "transactionalId": self.transactional_id, "jobModelVersion": version,
                "checkpoints": checkpoints}, separators=(",", ":")).encode(), delivered)
        except KafkaException as e:  # nothing committed yet
            raise self._abort_after(e) from e
        self._commit()
        # (a commit whose record's report never came: the offset is only informative)
        return record_offset[0] if record_offset else -1

    def _commit(self) -> None:
        """Commit the open transaction. librdkafka's rules: a retriable error (a timeout)
        is retried, the transaction's outcome being unknown until it answers; an
        abortable one is aborted (nothing visible). Any other leaves the outcome unknown:
        this producer is then dead (:class:`Fenced`), and the worker's next incarnation
        fences its id and reads the log for what it committed."""
        while True:
            try:
                self._producer.commit_transaction(self._timeout_s)
                return
            except KafkaException as e:
                err = e.args[0] if e.args else None
                if isinstance(err, KafkaError) and not _fenced(e):
                    if err.retriable():
                        log.warning("transaction commit not answered (%s): trying again",
                                    err)
                        continue
                    if err.txn_requires_abort():
                        raise self._abort_after(e) from e
                raise self._fence(e) from e

    def _abort_after(self, e: KafkaException) -> Exception:
        """The exception to raise after ``e`` left the open transaction uncommitted:
        :class:`TransactionFailed` once it is aborted, :class:`Fenced` when the producer
        cannot go on."""
        if _fenced(e):
            return self._fence(e)
        try:
            self._abort()
        except KafkaException as abort_error:
            return self._fence(abort_error)
        return TransactionFailed(str(e))

    def _produce(self, topic: str, key: bytes | None, value: bytes | None,
                 callback: Any = None) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, partition=(
                    LOG_PARTITION if topic == self._log else -1), on_delivery=callback)
                return
            except BufferError:  # the local queue is full: let librdkafka send
                self._producer.poll(0.05)

    def _abort(self) -> None:
        try:
            self._producer.abort_transaction(self._timeout_s)
        except KafkaException as e:
            if _fenced(e):
                raise self._fence(e) from e
            raise

    def _fence(self, e: KafkaException) -> Fenced:
        """This producer is dead (fenced, or another fatal error: librdkafka refuses every
        call after one): remember why."""
        self._dead = str(e)
        log.error("transactional id %s fenced: %s", self.transactional_id, e)
        return Fenced(self._dead)

    def close(self) -> None:
        """Drop the producer (an open transaction is aborted by the broker after its
        timeout, or at once by the next ``init_transactions`` with this id). Never raises:
        a fenced producer's flush does, and a worker renewing after a fence closes one."""
        with contextlib.suppress(KafkaException):
            self._producer.flush(0)


def fence(bootstrap: Brokers, ids: Iterable[str], timeout_s: float = 30.0) -> None:
    """End every producer holding one of ``ids``: its open transaction aborted, each of
    its later writes and commits refused. Idempotent."""
    for tid in ids:
        producer = Producer(settings_of(bootstrap).client({"transactional.id": tid}))
        producer.init_transactions(timeout_s)
        producer.flush(0)
        log.info("fenced transactional id %s", tid)


def read_log(bootstrap: Brokers, log_topic: str, ids: set[str], from_offset: int = 0,
             timeout_s: float = 30.0) -> list[CheckpointRecord]:
    """The committed records of ``ids`` in the checkpoint log from ``from_offset``, in
    order, read up to the log's end as it is now. Call after :func:`fence`: then no
    transaction of ``ids`` is open, and none will commit later."""
    return list(_records(bootstrap, log_topic, ids, from_offset, timeout_s))


def _records(bootstrap: Brokers, log_topic: str, ids: set[str], from_offset: int,
             timeout_s: float) -> Iterator[CheckpointRecord]:
    consumer = Consumer(settings_of(bootstrap).client({
        "group.id": "coxswain-log-reader", "enable.auto.commit": False,
        "isolation.level": "read_committed", "enable.partition.eof": False}))
    try:
        tp = TopicPartition(log_topic, LOG_PARTITION)
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
        start = max(from_offset, low)
        if start >= high:
            return
        consumer.assign([TopicPartition(log_topic, LOG_PARTITION, start)])
        deadline = time.monotonic() + timeout_s
        # read_committed stops at the last stable offset: transactions of live workers
        # still open below ``high`` end within their commit; wait for them, not for EOF
        while True:
            position = int(consumer.position([tp])[0].offset or 0)
            if position >= high:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"checkpoint log {log_topic} not read to {high} within "
                                   f"{timeout_s:.0f}s (at {position})")
            for msg in consumer.consume(500, 0.2):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                offset = int(msg.offset() or 0)
                if offset >= high:
                    return
                key = (msg.key() or b"").decode()
                if key not in ids:
                    continue
                body = json.loads(msg.value() or b"{}")
                yield CheckpointRecord(offset, key,
                                       int(body["jobModelVersion"]), body["checkpoints"])
    finally:
        consumer.close()
