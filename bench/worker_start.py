"""A worker's Spark start with and without the JVM class archive, in one session, and
with the archive and the Spark home whose Python processes import the installed PySpark
(``worker.jvm.spark_home``; what a worker uses).

What a ``coxswain worker`` does before it registers, each in a fresh process: the Spark
session (``local[2]``, the connector jars), the import check on the executors' Python
workers, which also warms them for the first batch, and (``warm``) the batch path's
warm-up (``worker.runtime.warm_up``). Alternating runs, so load drifts touch all alike;
medians and their ratios.

Run: python -m bench.worker_start [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from common.paths import cache_dir
from worker.jvm.class_archive import class_archive, create

ONE_START = """
import json, sys, time
from pathlib import Path
from worker.runtime.app import check_on_executors
from grouping.key_hash import DEFAULT_KEY_HASH
from worker.jvm.class_archive import ClassArchive
from worker.runtime.spark import spark_session, stop_spark
from worker.runtime.task_api import task_api
from worker.runtime.warm_up import warm_batch_path
archive = ClassArchive(Path(sys.argv[1])) if sys.argv[1] else None
homes = Path(sys.argv[2]) if sys.argv[2] else None
started = time.monotonic()
spark = spark_session("local[2]", "bench-start", class_archive=archive, spark_homes=homes)
session = time.monotonic()
check_on_executors(spark, "tests.worker.apps", "count_task")
checked = time.monotonic()
warm_batch_path(spark, task_api(lambda ctx, rows: None, None, "127.0.0.1:9"), "w",
                DEFAULT_KEY_HASH)
warmed = time.monotonic()
stop_spark(spark)
print(json.dumps({"session": session - started, "check": checked - session,
                  "total": checked - started, "warm": warmed - checked}))
"""


def one_start(archive: str, homes: str) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_HOME"}
    done = subprocess.run([sys.executable, "-c", ONE_START, archive, homes],
                          capture_output=True, text=True, check=True, timeout=600, env=env)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    archive = class_archive(cache_dir() / "jvm")
    assert archive is not None, "no java"
    create(archive, wait=True)
    homes = str(cache_dir() / "jvm")
    runs: dict[str, list[dict[str, float]]] = {"without": [], "with": [], "home": []}
    for i in range(args.runs):
        for name, path, home in (("without", "", ""), ("with", str(archive.path), ""),
                                 ("home", str(archive.path), homes)):
            runs[name].append(one_start(path, home))
            print(f"run {i + 1} {name:7}: " + ", ".join(
                f"{k} {v:.1f}s" for k, v in runs[name][-1].items()), flush=True)
    medians = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
               for name, rs in runs.items()}
    for name, m in medians.items():
        print(f"median {name:7}: " + ", ".join(f"{k} {v:.1f}s" for k, v in m.items()))
    print(f"with/without (total): {medians['with']['total'] / medians['without']['total']:.2f}"
          f", home/with (total): {medians['home']['total'] / medians['with']['total']:.2f}"
          f", (warm-up): {medians['home']['warm'] / medians['with']['warm']:.2f}"
          f"  load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
