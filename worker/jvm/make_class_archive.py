"""Make the worker JVM's class archive: ``python -m worker.jvm.make_class_archive``
(once per host, Java and PySpark; ``deploy/setup.sh`` runs it). With ``--dump-to PART``
(how :func:`worker.jvm.class_archive.create` runs it in a child process) it is the run
whose JVM writes the archive: what a worker's start runs (a session, a pandas job on
Python workers, a streaming query), its classes dumped to ``PART`` as its JVM exits.

Apart from ``worker.jvm.class_archive`` so that ``-m`` runs a module the package has
not imported already (the package's Spark session imports the archive's library)."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from common.paths import cache_dir
from worker.jvm.class_archive import QUIET, class_archive, create
from worker.runtime.spark import spark_session, stop_spark

log = logging.getLogger("coxswain.worker")


def one_row(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    for _ in batches:
        pass
    yield pd.DataFrame({"n": [1]})


def dump(part: Path, master: str) -> None:
    # the worker's Spark home (``spark_home``): the class path its JVMs will map
    spark = spark_session(master, "coxswain-class-archive", spark_homes=part.parent, conf={
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m worker.jvm.make_class_archive",
        description="make the worker JVM's class-data-sharing archive (workers use it "
                    "when it exists; made once per host, Java and PySpark)")
    parser.add_argument("--folder", type=Path, help="where (default: the cache's jvm/)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--dump-to", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dump_to is not None:
        dump(args.dump_to, args.master)
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    archive = class_archive(args.folder or cache_dir() / "jvm")
    if archive is None:
        log.error("no java found (JAVA_HOME or PATH)")
        return 1
    return 0 if create(archive, args.master, wait=True) else 1


if __name__ == "__main__":
    sys.exit(main())
