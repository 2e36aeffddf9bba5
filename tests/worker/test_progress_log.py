"""The worker's progress lines: one INFO line per interval (the first batch and a long one
on their own), each batch at DEBUG; py4j's callback traces shortened to their cause."""

from __future__ import annotations

import logging
import sys

import pytest

from worker.runtime.progress import ProgressLog
from worker.runtime.spark import ShortTraces, java_cause


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_batches_the_driver_ran_are_counted_in_their_line(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    progress = ProgressLog(interval_s=10, clock=clock)
    with caplog.at_level(logging.DEBUG, logger="coxswain.worker"):
        progress.batch(0, 1, 1, 2, 0.01, None, False, in_driver=True)
        for i in range(1, 5):
            clock.now += 1
            progress.batch(i, 50 if i == 4 else 1, 1, 2, 0.01, None, False,
                           in_driver=i != 4)
        clock.now += 10
        progress.batch(5, 1, 1, 2, 0.01, None, False, in_driver=True)
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert info[0] == "batch 0: 1 records for 1 of 2 tasks in 0.01s in the driver"
    assert info[1] == ("batches 1-5: 54 records for up to 1 of 2 tasks in 5 batches of "
                       "0.01s on average (4 in the driver)")
    assert debug[4] == "batch 4: 50 records for 1 of 2 tasks in 0.01s"


def test_batches_are_summed_up_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    progress = ProgressLog(interval_s=10, lag=lambda: 42, clock=clock)
    with caplog.at_level(logging.DEBUG, logger="coxswain.worker"):
        progress.batch(0, 58, 8, 8, 2.5, 1000, False)  # the first: a line of its own
        for i in range(1, 31):
            clock.now += 0.4
            progress.batch(i, 10, 3 + i % 4, 8, 0.3, 2000, False)
        clock.now += 30
        progress.batch(31, 5000, 8, 8, 30.0, 2000, False)  # a long batch: its own line
        clock.now += 1
        progress.batch(32, 3, 1, 8, 0.2, 2000, False)  # within the interval: not yet
        progress.flush()  # (a stop): now
        progress.flush()  # nothing more
    info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) == 33  # every batch
    assert info[0] == ("batch 0: 58 records for 8 of 8 tasks in 2.50s, next at most 1000 "
                       "records; 42 records behind")
    # 25 batches of 0.4 s reach 10 s: batches 1-25 in one line, then 26-31 at the long one
    assert info[1] == ("batches 1-25: 250 records for up to 6 of 8 tasks in 25 batches of "
                       "0.30s on average, next at most 2000 records; 42 records behind")
    assert info[2].startswith("batches 26-31: 5050 records for up to 8 of 8 tasks in 6 ")
    assert info[3] == "batch 32: 3 records for 1 of 8 tasks in 0.20s; 42 records behind"
    assert len(info) == 4


def test_no_lag_known_and_no_limit_say_nothing_of_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="coxswain.worker"):
        ProgressLog().batch(3, 7, 1, 2, 0.5, None, True)
    assert caplog.messages == ["batch 3: 7 records for 1 of 2 tasks in 0.50s (cut short)"]


JAVA_ERROR = """Traceback (most recent call last):
  File "py4j/clientserver.py", line 644, in _call_proxy
py4j.protocol.Py4JJavaError: An error occurred while calling o10472.save.
: org.apache.spark.SparkException: [SPARK_JOB_CANCELLED] Job 287 cancelled as part of \
cancellation of all jobs SQLSTATE: XXKDA
\tat org.apache.spark.errors.SparkCoreErrors$.sparkJobCancelled(SparkCoreErrors.scala:222)
\tat org.apache.spark.scheduler.DAGScheduler.handleJobCancellation(DAGScheduler.scala:3233)
"""


def record_of(error: BaseException) -> logging.LogRecord:
    try:
        raise error
    except type(error):
        return logging.LogRecord("py4j.clientserver", logging.ERROR, __file__, 1,
                                 "There was an exception while executing the Python Proxy "
                                 "on the Python Side.", None, sys.exc_info())


def test_a_callbacks_trace_is_shortened_to_its_cause() -> None:
    record = record_of(RuntimeError("boom\n  and its long details"))
    assert ShortTraces().filter(record)
    assert record.exc_info is None and record.levelno == logging.ERROR
    assert record.getMessage() == ("There was an exception while executing the Python Proxy "
                                   "on the Python Side. RuntimeError: boom (the whole trace "
                                   "at --log-level DEBUG)")


def test_a_job_cancelled_by_the_worker_is_said_at_info() -> None:
    record = record_of(RuntimeError(JAVA_ERROR))
    assert ShortTraces().filter(record)
    assert record.levelno == logging.INFO and record.levelname == "INFO"
    assert "[SPARK_JOB_CANCELLED] Job 287 cancelled" in record.getMessage()
    assert "DAGScheduler" not in record.getMessage()


def test_at_debug_the_whole_trace_stays() -> None:
    worker = logging.getLogger("coxswain.worker")
    before = worker.level
    worker.setLevel(logging.DEBUG)
    try:
        record = record_of(RuntimeError("boom"))
        assert ShortTraces().filter(record)
        assert record.exc_info is not None
    finally:
        worker.setLevel(before)


def test_the_java_cause_is_the_jvm_exceptions_own_line_on() -> None:
    assert (java_cause(JAVA_ERROR) or "").startswith("org.apache.spark.SparkException: [SPARK_JOB")
    assert java_cause("no py4j here") is None
