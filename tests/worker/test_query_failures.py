"""Why a worker's query ended, and the bound on starting it again (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from worker.runtime.query_failures import (
    RestartPolicy,
    Restarts,
    app_file,
    classify,
    python_traceback,
)

CONNECT_BACK = """org.apache.spark.SparkException: Job aborted due to stage failure: Task 0
in stage 3.0 failed 1 times, most recent failure: Lost task 0.0 in stage 3.0 (TID 7):
org.apache.spark.SparkException: Python worker failed to connect back.
\tat org.apache.spark.api.python.PythonWorkerFactory.createSimpleWorker(...)
Caused by: java.net.SocketTimeoutException: Timed out while waiting for the Python worker
"""

APP_ERROR = """pyspark.errors.exceptions.captured.PythonException:
  An exception was thrown from the Python worker. Please see the stack trace below.
Traceback (most recent call last):
  File "/tmp/spark-1/userFiles-2/pyspark.zip/pyspark/worker.py", line 3612, in process
  File "/work/main/worker/runtime/task_api.py", line 133, in call
    return fn(TaskContext(processor_id, version, name, store),
  File "/tmp/spark-1/userFiles-2/examples/first_job.py", line 12, in process_task
    orders = [json.loads(v) for v in rows["value"]]
json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)

\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException
"""


def test_a_failure_through_the_apps_code_is_the_apps_wherever_its_copy_ran() -> None:
    files = (app_file("examples.first_job"),)
    assert files == ("examples/first_job.py",)
    assert classify(APP_ERROR, files).in_app
    infra = classify(CONNECT_BACK, files)
    assert not infra.in_app
    assert infra.summary == "Python worker failed to connect back."
    assert classify("the query did not start: An error occurred while calling o217.load.\n"
                    "\tat py4j.reflection.MethodInvoker.invoke(MethodInvoker.java:244)",
                    files).summary == "the query did not start: An error occurred while " \
                                      "calling o217.load."
    # a longer name ending the same is not the app's
    assert not classify(APP_ERROR.replace("examples/first_job.py", "examples/xfirst_job.py"),
                        files).in_app
    assert app_file("myjobs", is_package=True) == "myjobs/__init__.py"


def test_the_apps_traceback_comes_first_in_the_message() -> None:
    found = python_traceback(APP_ERROR)
    assert found.startswith("Traceback (most recent call last):")
    assert found.endswith("json.decoder.JSONDecodeError: Expecting value: line 1 column 1 "
                          "(char 0)")
    assert "BasePythonRunner" not in found
    assert python_traceback(CONNECT_BACK) == CONNECT_BACK  # none: the text as it is


def test_restarts_back_off_and_stop_at_the_bound_within_the_window() -> None:
    restarts = Restarts(RestartPolicy(max_restarts=3, window_s=100.0, first_delay_s=1.0,
                                      max_delay_s=3.0))
    assert [restarts.next_delay(t) for t in (0.0, 1.0, 2.0)] == [1.0, 2.0, 3.0]
    assert restarts.next_delay(3.0) is None  # spent within the window
    assert restarts.next_delay(100.5) == 3.0  # the first left the window: one more
    assert restarts.total == 4
    assert Restarts(RestartPolicy(max_restarts=0)).next_delay(0.0) is None


@given(st.lists(st.floats(0.0, 10.0), min_size=1, max_size=60),
       st.integers(0, 6), st.floats(1.0, 50.0))
def test_never_more_restarts_within_a_window_than_the_bound(
    gaps: list[float], bound: int, window: float,
) -> None:
    restarts = Restarts(RestartPolicy(max_restarts=bound, window_s=window))
    now, granted = 0.0, []
    for gap in gaps:
        now += gap
        delay = restarts.next_delay(now)
        if delay is not None:
            assert 0.0 <= delay <= restarts.policy.max_delay_s
            granted.append(now)
    for t in granted:
        assert sum(1 for u in granted if t <= u < t + window) <= bound
    assert restarts.total == len(granted)
