"""The worker's Spark session: the Kafka connector's jars from the local cache, Python
workers running this interpreter, and a JVM that is gone when the worker is."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

from pyspark.sql import SparkSession

from worker.jars import connector_jars

log = logging.getLogger("coxswain.worker")


def stop_spark(spark: SparkSession, timeout_s: float = 30.0) -> None:
    """Stop ``spark`` and wait for its JVM to exit, so nothing outlives the worker.

    PySpark's JVM exits on its own once the Python process is gone (it watches its stdin),
    but only later; closing that stdin and waiting makes the exit synchronous.
    """
    gateway = spark.sparkContext._gateway
    jvm = getattr(gateway, "proc", None)
    spark.stop()
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


def spark_session(master: str, app_name: str = "coxswain-worker") -> SparkSession:
    """A Spark session with the Kafka connector's jars from the local cache, whose Python
    workers run this interpreter (with its packages: pandas for ``process_task``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master).appName(app_name)
             .config("spark.jars", ",".join(str(p) for p in connector_jars()))
             .config("spark.ui.enabled", "false")
             # small micro-batches: one shuffle partition per core, not coalesced
             .config("spark.sql.adaptive.coalescePartitions.enabled", "false")
             .getOrCreate())
    spark.conf.set("spark.sql.shuffle.partitions",
                   str(max(1, spark.sparkContext.defaultParallelism)))
    return spark
