"""What a worker checks when it starts, before Spark starts or it registers: the mistakes
a first hour makes, each told in seconds in one line that says what to do.

Before, each passed unnoticed until it failed a batch minutes later, as dozens of warnings
and a long Java stack trace (a misspelled output topic), or never failed at all: a worker
on another Kafka cluster than its coordinator's read nothing and showed lag 0; a bucket
missing failed every commit, retried forever. Checked here: the Kafka broker answers,
the output topic exists, the job's input topics exist there with the partition count
the coordinator sees, and a stateful worker's blob store answers with its bucket there.

A coordinator that does not answer at once is not a mistake of this kind (it may be
starting, and registering waits for it): the input check is then skipped, logged.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from common.kafka_clients import Brokers, settings_of

if TYPE_CHECKING:
    from worker.state.blobs import BlobStoreOptions

log = logging.getLogger("coxswain.worker")

BROKER_TIMEOUT_S = 10.0


class StartCheckFailed(ValueError):
    """A mistake found at start; the message says what to do."""


class BrokerUnreachable(StartCheckFailed):
    """The Kafka broker did not answer."""


class OutputTopicMissing(StartCheckFailed):
    """The broker answered and has no such topic."""


def broker_topics(bootstrap: Brokers, timeout_s: float = BROKER_TIMEOUT_S) -> dict[str, int]:
    """Every topic the broker has, with its partition count (all of them: a metadata
    request naming a topic could create it on a broker that creates topics on first use,
    hiding a typo)."""
    from confluent_kafka import KafkaException  # noqa: PLC0415 (the worker extra)
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    kafka = settings_of(bootstrap)
    admin = AdminClient(kafka.client({"log_level": 2}))
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as e:
        raise BrokerUnreachable(
            f"the Kafka broker at {kafka.bootstrap} did not answer in {timeout_s:.0f}s "
            f"({e.args[0] if e.args else e}): check --kafka-bootstrap (and --kafka-config "
            "for a secured cluster), or start the broker first") from None
    return {name: len(t.partitions) for name, t in metadata.topics.items()}


def closest(topic: str, topics: Mapping[str, int]) -> str:
    """The (up to three) topic names closest to ``topic``, for a hint; "" for none."""
    return ", ".join(difflib.get_close_matches(topic, sorted(topics), n=3))


def check_output_topic(topics: Mapping[str, int], topic: str, where: str) -> None:
    """:class:`OutputTopicMissing`, naming the closest topics, when ``topic`` is not one
    of ``topics`` (the broker at ``where``'s)."""
    if topic in topics:
        return
    close = closest(topic, topics)
    hint = f"; did you mean {close}?" if close else "."
    raise OutputTopicMissing(
        f"the output topic {topic!r} does not exist on the Kafka broker at {where}{hint} "
        "Create it first (the worker does not create topics), e.g. with the AdminClient "
        "or kafka-topics.sh --create")


def check_input_topics(topics: Mapping[str, int], inputs: Sequence[Mapping[str, Any]],
                       where: str) -> None:
    """The job's Kafka inputs (:func:`job_inputs`: ``kafka.TOPIC`` and the partitions the
    job reads) on this worker's broker: each there, with at least that many. Else the
    worker reads another cluster's topics than its coordinator plans (and showed lag 0,
    reading nothing)."""
    for item in inputs:
        system, _, topic = str(item.get("stream", "")).partition(".")
        if system != "kafka" or not topic:
            continue
        seen = item.get("partitions")
        if not isinstance(seen, int) or seen == 0:  # its coordinator does not see it either
            log.warning("the job's input topic %s is not on the Kafka broker at %s yet: "
                        "the job waits for it", topic, where)
            continue
        if topic not in topics:
            close = closest(topic, topics)
            hint = f" (it has {close})" if close else ""
            raise StartCheckFailed(
                f"the job's input topic {topic!r} does not exist on the Kafka broker at "
                f"{where}{hint}: the worker and its coordinator must use the same Kafka "
                "cluster (--kafka-bootstrap of both), and the topic must exist")
        # (partitions are only ever added: more here is a topic that grew, which its
        # coordinator sees within its poll interval; fewer, another cluster's topic)
        if topics[topic] < seen:
            raise StartCheckFailed(
                f"the job's input topic {topic!r} has {topics[topic]} partitions on the "
                f"Kafka broker at {where}, the job reads {seen}: the worker and its coordinator "
                "must use the same Kafka cluster (--kafka-bootstrap of both) and the job's "
                "partition count (--input kafka.TOPIC:N) the topic's")


def job_inputs(status: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The input streams of a ``/status`` answer with the partitions the job reads
    (``inputStreams``; a coordinator before it: ``monitoredInputs``, the topics it
    watches); none when there is no answer."""
    if status is None:
        return []
    for key in ("inputStreams", "monitoredInputs"):
        inputs = status.get(key)
        if isinstance(inputs, list):
            return list(inputs)
    return []


def check_blob_store(url: str, endpoint: str | None,
                     options: BlobStoreOptions | None = None) -> None:
    """One listing of the blob store's prefix: a store that does not answer, a bucket
    missing or credentials refused are told now, not as every commit's failure."""
    from worker.state.blobs import BlobStoreOptions, open_blob_store  # noqa: PLC0415

    options = options or BlobStoreOptions()
    quick = dataclasses.replace(  # an answer in seconds: the commits retry, not this
        options, timeout_s=min(options.timeout_s, 15.0),
        connect_timeout_s=min(options.connect_timeout_s, 5.0),
        retries=min(options.retries, 1), retry_timeout_s=min(options.retry_timeout_s, 10.0))
    try:
        store = open_blob_store(url, endpoint, quick)
        next(iter(store.list("")), None)
    except Exception as e:  # obstore's errors name the cause (NoSuchBucket, refused...)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise StartCheckFailed(
            f"the blob store {url} did not answer a listing ({type(e).__name__}: "
            f"{first[:300]}): check --blob-store (its bucket must exist), "
            "--blob-store-endpoint and the AWS credentials") from None


__all__ = ["BrokerUnreachable", "OutputTopicMissing", "StartCheckFailed", "broker_topics",
           "check_blob_store", "check_input_topics", "check_output_topic", "job_inputs"]
