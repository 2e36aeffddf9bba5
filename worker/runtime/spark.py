"""The worker's Spark session: the Kafka connector's jars from the local cache, Python
workers running this interpreter, and a JVM that is gone when the worker is."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession

from worker.jvm.class_archive import ClassArchive, spark_options
from worker.jvm.jars import connector_jars
from worker.jvm.spark_home import spark_home_for
from worker.runtime.query_failures import summary

log = logging.getLogger("coxswain.worker")


def stop_spark(spark: SparkSession, timeout_s: float = 30.0) -> None:
    """Stop ``spark`` and wait for its JVM to exit, so nothing outlives the worker.

    PySpark's JVM exits on its own once the Python process is gone (it watches its stdin),
    but only later; closing that stdin and waiting makes the exit synchronous.
    """
    gateway = spark.sparkContext._gateway
    jvm = getattr(gateway, "proc", None)
    spark.stop()
    # PySpark keeps its gateway for the next context of this process: it is gone now
    SparkContext._gateway = None
    SparkContext._jvm = None
    if jvm is None:
        return
    if jvm.stdin is not None:
        jvm.stdin.close()
    try:
        jvm.wait(timeout_s)
    except subprocess.TimeoutExpired:
        log.warning("Spark's JVM (pid %d) did not exit in %.0fs; killing it", jvm.pid,
                    timeout_s)
        jvm.kill()
        jvm.wait(10)


def use_compiled_home(python: str, folder: Path) -> None:
    """``SPARK_HOME`` for the JVM about to start: the compiled mirror when it applies
    (``spark_home_for``); a folder that cannot be written costs the speed-up, not a start."""
    try:
        home = spark_home_for(python, folder)
    except OSError as e:
        log.warning("Spark's Python processes import PySpark from its zip archive (no "
                    "Spark home could be made under %s: %s)", folder, e)
        return
    if home is not None:
        os.environ["SPARK_HOME"] = str(home)  # read when the JVM is launched


FS_CHECKPOINTS = ("org.apache.spark.sql.execution.streaming.checkpointing."
                  "FileSystemBasedCheckpointFileManager")

#: settings Coxswain makes itself: ``--conf`` cannot change them (spark.jars adds to ours)
OWN_SETTINGS = {"spark.master": "--spark-master", "spark.pyspark.python": "--executor-python",
                "spark.pyspark.driver.python": "the interpreter running the worker"}


def parse_conf(items: Sequence[str]) -> dict[str, str]:
    """``--conf KEY=VALUE`` items; ``ValueError`` names the first bad one."""
    conf: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or any(c.isspace() for c in key):
            raise ValueError(f"--conf takes KEY=VALUE, not {item!r}")
        if key in OWN_SETTINGS:
            raise ValueError(f"--conf {key}: set it with {OWN_SETTINGS[key]}")
        conf[key] = value
    return conf


def spark_session(master: str, app_name: str = "coxswain-worker",
                  conf: Mapping[str, str] | None = None,
                  executor_python: str | None = None,
                  class_archive: ClassArchive | None = None,
                  spark_homes: Path | None = None) -> SparkSession:
    """A Spark session with the Kafka connector's jars from the local cache, whose Python
    workers run ``executor_python`` (by default ``$PYSPARK_PYTHON``, else this interpreter:
    it has the packages ``process_task`` needs), whose driver JVM maps ``class_archive``
    when it exists, with the user's ``conf`` over Coxswain's defaults. With
    ``spark_homes``, Spark's Python processes import the installed PySpark when they can
    (a Spark home kept there: ``worker.jvm.spark_home``)."""
    python = executor_python or os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_PYTHON"] = python  # read when the context starts
    if spark_homes is not None:
        use_compiled_home(python, spark_homes)
    if master.startswith("local") and "SPARK_LOCAL_IP" not in os.environ:
        # a local master's driver and executors are one JVM: loopback is where it
        # listens (else Spark picks the first non-loopback interface and warns at
        # every start that the hostname resolves to loopback)
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    user = dict(conf or {})
    jars = [str(p) for p in connector_jars()]
    if user.get("spark.jars"):
        jars.append(user.pop("spark.jars"))
    java_options = spark_options(class_archive, user.pop("spark.driver.extraJavaOptions", None))
    if java_options:
        user["spark.driver.extraJavaOptions"] = java_options
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.jars", ",".join(jars))
               .config("spark.ui.enabled", "false")
               # a worker's log is read by people: no console progress bars in it
               .config("spark.ui.showConsoleProgress", "false")
               # small micro-batches: one shuffle partition per core, not coalesced
               .config("spark.sql.adaptive.coalescePartitions.enabled", "false")
               # the query's own offset and commit logs (a throwaway folder per query:
               # Coxswain's checkpoints say where tasks start) through Hadoop's
               # FileSystem API: the default FileContext one forks `readlink` for every
               # rename on a local disk, 2 per batch (in the demo on a 2-core machine,
               # walCommit + commitOffsets 120-240 ms -> 55-100 ms; bench/RESULTS.md)
               .config("spark.sql.streaming.checkpointFileManagerClass", FS_CHECKPOINTS))
    for key, value in user.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    quiet_by_design(spark)
    install_short_traces()
    if "spark.sql.shuffle.partitions" not in user:
        spark.conf.set("spark.sql.shuffle.partitions",
                       str(max(1, spark.sparkContext.defaultParallelism)))
    return spark


#: Spark's warnings that a worker causes by design, at every batch or query start: the
#: micro-batches run back to back on a short trigger ("Current batch is falling behind"),
#: and the session's adaptive execution is off for streaming queries
QUIET_BY_DESIGN = (
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
    "org.apache.spark.sql.execution.streaming.runtime.ResolveWriteToStream",
)


def quiet_by_design(spark: SparkSession) -> None:
    """Errors only from :data:`QUIET_BY_DESIGN`'s loggers."""
    jvm: Any = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.ERROR
    for name in QUIET_BY_DESIGN:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)


class ShortTraces(logging.Filter):
    """py4j logs an exception raised in a Python callback (a batch's ``foreachBatch``)
    with its whole Java and Python trace, about a hundred lines: here shortened to its
    cause unless the worker logs at DEBUG. A job that Spark cancelled because the worker
    stops or restarts its query is expected there, and said at INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info or log.isEnabledFor(logging.DEBUG):
            return True
        error = record.exc_info[1]
        try:  # (a py4j error asks the JVM for its text)
            text = logging.Formatter().formatException(record.exc_info)
        except Exception:
            text = repr(error)  # the JVM may be gone: the exception's type then
        java = java_cause(text)
        cause = summary(java) if java is not None else \
            "".join(traceback.format_exception_only(error)).strip().splitlines()[0]
        message = record.getMessage()
        record.msg = "%s %s (the whole trace at --log-level DEBUG)"
        record.args = (message, cause)
        record.exc_info, record.exc_text = None, None
        if "SPARK_JOB_CANCELLED" in cause:
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def java_cause(text: str) -> str | None:
    """From a py4j error's text, the JVM exception's own line onwards (its message);
    None when ``text`` has none."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(": "):  # py4j: "An error occurred while calling o1.save.\n: <it>"
            return "\n".join([line[2:], *lines[i + 1:]])
    return None


def install_short_traces() -> None:
    """:class:`ShortTraces` on py4j's callback server logger (once per process)."""
    callbacks = logging.getLogger("py4j.clientserver")
    if not any(isinstance(f, ShortTraces) for f in callbacks.filters):
        callbacks.addFilter(ShortTraces())
