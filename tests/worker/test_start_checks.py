"""A worker's start-up checks (issue #50): each mistake of a first hour is told at start
in one line that says what to do, before Spark starts or the worker registers; checked
against a real broker, S3 API server and coordinator."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from service.local.kafka import LocalKafka
from service.local.s3 import LocalS3
from tests.service.conftest import StartServer
from worker.start_checks import (
    BrokerUnreachable,
    OutputTopicMissing,
    StartCheckFailed,
    broker_topics,
    check_blob_store,
    check_input_topics,
    check_output_topic,
    job_inputs,
)
from worker.state.blobs import BlobStoreOptions


def _topic(kafka: LocalKafka, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, "log_level": 2})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def worker(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "worker", "--app",
         "tests.worker.apps:count_task", "--api", "task", *args],
        capture_output=True, text=True, timeout=timeout_s, check=False)


def one_line_refusal(result: subprocess.CompletedProcess[str], says: str) -> None:
    assert result.returncode == 1, result.stderr
    assert says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and "registered as" not in result.stderr
    assert len([line for line in result.stderr.splitlines()
                if line.startswith("coxswain:")]) == 1, result.stderr


def test_a_missing_output_topic_is_named_with_the_closest_ones(kafka: LocalKafka) -> None:
    name = f"click-counts-{uuid.uuid4().hex[:6]}"
    _topic(kafka, name, 3)
    topics = broker_topics(kafka.bootstrap)
    assert topics[name] == 3
    check_output_topic(topics, name, kafka.bootstrap)  # there: nothing to say
    with pytest.raises(OutputTopicMissing, match=rf"'{name}z' does not exist .* did you mean "
                                                 rf".*{name}"):
        check_output_topic(topics, f"{name}z", kafka.bootstrap)


def test_a_broker_that_does_not_answer_is_told_in_seconds() -> None:
    started = time.monotonic()
    with pytest.raises(BrokerUnreachable, match=r"127.0.0.1:9 did not answer in 1s.*"
                                                r"--kafka-bootstrap"):
        broker_topics("127.0.0.1:9", timeout_s=1.0)
    assert time.monotonic() - started < 10


def test_input_topics_must_be_on_the_workers_broker_with_the_jobs_partitions() -> None:
    topics = {"orders": 8, "clicks": 4}
    where = "127.0.0.1:9092"
    check_input_topics(topics, [{"stream": "kafka.orders", "partitions": 8},
                                {"stream": "kafka.clicks", "partitions": 2},  # it grew
                                {"stream": "kinesis.s", "partitions": 9},  # not Kafka's
                                {"stream": "kafka.later", "partitions": None}], where)
    with pytest.raises(StartCheckFailed, match=r"'order' does not exist .*it has orders"):
        check_input_topics(topics, [{"stream": "kafka.order", "partitions": 8}], where)
    with pytest.raises(StartCheckFailed, match=r"'orders' has 8 partitions .* the job "
                                               r"reads 16"):
        check_input_topics(topics, [{"stream": "kafka.orders", "partitions": 16}], where)
    assert job_inputs(None) == []
    assert job_inputs({"inputStreams": [{"stream": "kafka.a", "partitions": 1}],
                       "monitoredInputs": []}) == [{"stream": "kafka.a", "partitions": 1}]
    assert job_inputs({"monitoredInputs": [{"stream": "kafka.a"}]}) == [{"stream": "kafka.a"}]


def test_a_blob_store_bucket_missing_or_unreachable_is_told(s3_server: LocalS3) -> None:
    bucket = f"start-{uuid.uuid4().hex[:8]}"
    s3_server.create_bucket(bucket)
    options = BlobStoreOptions(timeout_s=5, connect_timeout_s=2, retries=0,
                               retry_timeout_s=5)
    check_blob_store(f"s3://{bucket}/job", s3_server.endpoint, options)
    with pytest.raises(StartCheckFailed, match=r"s3://no-such-bucket-x/job did not answer.*"
                                               r"its bucket must exist"):
        check_blob_store("s3://no-such-bucket-x/job", s3_server.endpoint, options)
    started = time.monotonic()
    with pytest.raises(StartCheckFailed, match="did not answer"):
        check_blob_store(f"s3://{bucket}/job", "http://127.0.0.1:9", options)
    assert time.monotonic() - started < 30


def test_a_worker_with_a_misspelled_output_topic_exits_at_start(kafka: LocalKafka) -> None:
    """Before Spark starts or the coordinator is called (none listens here)."""
    started = time.monotonic()
    result = worker("--coordinator", "http://127.0.0.1:9", "--kafka-bootstrap",
                    kafka.bootstrap, "--output-topic", "click-countz")
    one_line_refusal(result, "the output topic 'click-countz' does not exist")
    assert time.monotonic() - started < 60


def test_a_worker_on_another_clusters_input_topic_exits_at_start(
    kafka: LocalKafka, start_server: StartServer,
) -> None:
    """The job reads 4 partitions of a topic the worker's broker has with 2 (a
    coordinator told ``--input kafka.T:4``, or one on another cluster)."""
    topic, output = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
    _topic(kafka, topic, 2)
    _topic(kafka, output)
    server = start_server("--input", f"kafka.{topic}:4")
    started = time.monotonic()
    result = worker("--coordinator", server.url, "--kafka-bootstrap", kafka.bootstrap,
                    "--output-topic", output)
    one_line_refusal(result, f"the job's input topic '{topic}' has 2 partitions")
    assert time.monotonic() - started < 60


def test_a_worker_whose_broker_does_not_answer_exits_at_start() -> None:
    started = time.monotonic()
    result = worker("--coordinator", "http://127.0.0.1:9", "--kafka-bootstrap",
                    "127.0.0.1:9", "--output-topic", "out")
    one_line_refusal(result, "the Kafka broker at 127.0.0.1:9 did not answer")
    assert time.monotonic() - started < 60


def test_a_stateful_worker_whose_bucket_is_missing_exits_at_start(
    kafka: LocalKafka, s3_server: LocalS3, start_server: StartServer, tmp_path: Path,
) -> None:
    topic = f"in-{uuid.uuid4().hex[:6]}"
    _topic(kafka, topic, 1)
    server = start_server("--input", f"kafka.{topic}", "--kafka-bootstrap", kafka.bootstrap,
                          "--stateful")
    result = worker("--coordinator", server.url, "--kafka-bootstrap", kafka.bootstrap,
                    "--output-topic", topic, "--stateful", "--state-dir",
                    str(tmp_path / "state"), "--blob-store", "s3://no-such-bucket-y/job",
                    "--blob-store-endpoint", s3_server.endpoint)
    one_line_refusal(result, "the blob store s3://no-such-bucket-y/job did not answer")
