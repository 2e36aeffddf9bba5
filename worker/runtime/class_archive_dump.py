"""The run whose JVM writes the class archive (``python -m worker.runtime.class_archive_dump
PART MASTER``, started by :func:`worker.runtime.class_archive.create`): what a worker's
start runs (a session, a pandas job on Python workers, a streaming query), its classes
dumped to ``PART`` as its JVM exits."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from worker.runtime.class_archive import QUIET
from worker.runtime.spark import spark_session, stop_spark


def one_row(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for _ in batches:
        pass
    yield pd.DataFrame({"n": [1]})


def dump(part: Path, master: str) -> None:
    spark = spark_session(master, "coxswain-class-archive", conf={
        "spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={part} {QUIET}"})
    try:
        spark.range(2, numPartitions=2).mapInPandas(one_row, "n long").collect()
        query = (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
                 .writeStream.format("noop").trigger(processingTime="200 milliseconds")
                 .start())
        try:
            deadline = time.monotonic() + 60
            while query.lastProgress is None and time.monotonic() < deadline:
                time.sleep(0.2)  # a batch planned and run
        finally:
            query.stop()
    finally:
        # the dump happens as the JVM exits: give it the time it takes (20 s here)
        stop_spark(spark, timeout_s=600)


if __name__ == "__main__":
    dump(Path(sys.argv[1]), sys.argv[2])
