"""A batch run in the driver writes its output itself (``worker.runtime.driver_batches``).

What Spark's Kafka sink would have written, the same way: keyed records partitioned by
murmur2 as Java's default partitioner does (so a key's output lands on one partition
whichever path ran its batch), an idempotent producer (Java's default), and every record
of the batch delivered before the batch ends. A delivery that fails fails the batch, as a
failed Spark write does: the batch is not committed, and its records are processed again
(at least once, as the sink's).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
from confluent_kafka import KafkaError, Producer

from common.kafka_clients import KafkaClientSettings

#: how long a batch's output may take to be acknowledged before the batch fails
DELIVERY_TIMEOUT_S = 60.0


class OutputNotDelivered(RuntimeError):
    """Some of a batch's output records were not acknowledged by the brokers."""


class DriverOutput:
    """The driver's producer for ``topic`` (made at the first write)."""

    def __init__(self, kafka: KafkaClientSettings, topic: str,
                 timeout_s: float = DELIVERY_TIMEOUT_S) -> None:
        self._kafka = kafka
        self._topic = topic
        self._timeout_s = timeout_s
        self._producer: Producer | None = None

    def _made(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(self._kafka.client({
                "enable.idempotence": True,
                "partitioner": "murmur2_random",  # a key's partition as Java's sink picks
                "linger.ms": 0,  # a batch's records go at once: the batch waits for them
            }))
        return self._producer

    def connect(self, timeout_s: float = 10.0) -> None:
        """Make the producer and connect it to the brokers (the topic's metadata), ahead
        of its first write."""
        self._made().list_topics(self._topic, timeout=timeout_s)

    def write(self, frames: Iterable[pd.DataFrame]) -> int:
        """Write the rows of ``frames`` (``key``, ``value``: bytes or None), and wait for
        every one to be acknowledged; how many. Raises :class:`OutputNotDelivered`."""
        producer = self._made()
        failed: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failed.append(err)

        sent = 0
        for frame in frames:
            for key, value in zip(frame["key"].tolist(), frame["value"].tolist(),
                                  strict=True):
                while True:
                    try:
                        producer.produce(self._topic, value=value, key=key,
                                         on_delivery=delivered)
                        break
                    except BufferError:  # the local queue is full: let it drain
                        producer.poll(0.05)
                sent += 1
        if sent == 0:
            return 0
        unsent = producer.flush(self._timeout_s)
        if failed or unsent:
            reason = str(failed[0]) if failed else f"not acknowledged in {self._timeout_s}s"
            raise OutputNotDelivered(f"{len(failed) + unsent} of {sent} output records to "
                                     f"{self._topic}: {reason}")
        return sent

    def close(self) -> None:
        """Deliver what is queued (nothing is, between batches) and let the producer go."""
        if self._producer is not None:
            self._producer.flush(self._timeout_s)
            self._producer = None


__all__ = ["DriverOutput", "OutputNotDelivered"]
