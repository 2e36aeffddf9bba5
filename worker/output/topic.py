"""The output topic checked when a worker starts, not at its first batch with records.

A misspelled ``--output-topic`` used to pass unnoticed: the worker registered, took tasks
and showed lag 0, and failed only when a batch first had output to write, minutes later,
with dozens of ``UNKNOWN_TOPIC_OR_PARTITION`` warnings and a long Java stack trace. The
broker is asked for its topics (all of them: a metadata request naming the topic could
create it on a broker that creates topics on first use, hiding the typo).
"""

from __future__ import annotations

import difflib
import logging

from common.kafka_clients import Brokers, settings_of

log = logging.getLogger("coxswain.worker")


class OutputTopicMissing(ValueError):
    """The broker answered and has no such topic."""


def check_output_topic(bootstrap: Brokers, topic: str, timeout_s: float = 15.0) -> None:
    """Raise :class:`OutputTopicMissing`, naming the closest topics the broker has, when
    ``topic`` is not there. A broker that does not answer in ``timeout_s`` is logged and
    let be (it may come up later; the batch's write then fails or waits as before)."""
    from confluent_kafka import KafkaException  # noqa: PLC0415 (the worker extra)
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    kafka = settings_of(bootstrap)
    admin = AdminClient(kafka.client({"log_level": 2}))
    try:
        topics = set(admin.list_topics(timeout=timeout_s).topics)
    except KafkaException as e:
        log.warning("the output topic %s was not checked: the broker at %s did not answer "
                    "(%s)", topic, kafka.bootstrap, e)
        return
    if topic in topics:
        return
    close = difflib.get_close_matches(topic, sorted(topics), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "."
    raise OutputTopicMissing(
        f"the output topic {topic!r} does not exist on the Kafka broker at {kafka.bootstrap}"
        f"{hint} Create it first (the worker does not create topics), e.g. with the "
        "AdminClient or kafka-topics.sh --create")


__all__ = ["OutputTopicMissing", "check_output_topic"]
