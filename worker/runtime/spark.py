"""The worker's Spark session: the Kafka connector's jars from the local cache, Python
workers running this interpreter, and a JVM that is gone when the worker is."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence

from pyspark import SparkContext
from pyspark.sql import SparkSession

from worker.jars import connector_jars
from worker.runtime.class_archive import ClassArchive, spark_options

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
                  class_archive: ClassArchive | None = None) -> SparkSession:
    """A Spark session with the Kafka connector's jars from the local cache, whose Python
    workers run ``executor_python`` (by default ``$PYSPARK_PYTHON``, else this interpreter:
    it has the packages ``process_task`` needs), whose driver JVM maps ``class_archive``
    when it exists, with the user's ``conf`` over Coxswain's defaults."""
    python = executor_python or os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_PYTHON"] = python  # read when the context starts
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
    if "spark.sql.shuffle.partitions" not in user:
        spark.conf.set("spark.sql.shuffle.partitions",
                       str(max(1, spark.sparkContext.defaultParallelism)))
    return spark
