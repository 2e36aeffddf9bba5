"""A misspelled output topic is told when the worker starts (issue #50), not at its first
batch with records minutes later; checked against the real broker."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from service.local.kafka import LocalKafka
from worker.output.topic import OutputTopicMissing, check_output_topic


def _topic(kafka: LocalKafka, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 2})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def test_a_missing_output_topic_is_named_with_the_closest_ones(kafka: LocalKafka) -> None:
    name = f"click-counts-{uuid.uuid4().hex[:6]}"
    _topic(kafka, name)
    check_output_topic(kafka.bootstrap, name)  # there: nothing to say
    with pytest.raises(OutputTopicMissing, match=rf"'{name}z' does not exist .* did you mean "
                                                 rf".*{name}"):
        check_output_topic(kafka.bootstrap, f"{name}z")


def test_a_broker_that_does_not_answer_is_not_a_reason_to_refuse() -> None:
    started = time.monotonic()
    check_output_topic("127.0.0.1:9", "anything", timeout_s=1.0)  # logged, let be
    assert time.monotonic() - started < 10


def test_a_worker_with_a_misspelled_output_topic_exits_at_start(kafka: LocalKafka) -> None:
    """Before Spark starts or the coordinator is called (none listens here)."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "worker", "--coordinator",
         "http://127.0.0.1:9", "--app", "tests.worker.apps:count_task", "--api", "task",
         "--kafka-bootstrap", kafka.bootstrap, "--output-topic", "click-countz"],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1, result.stderr
    assert "the output topic 'click-countz' does not exist" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 60
