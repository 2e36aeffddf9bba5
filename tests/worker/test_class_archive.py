"""The worker JVM's class-data archive, on a real JVM: made once, mapped by the driver's
JVM when it exists, ignored (never an error) when HotSpot cannot use it, and never left
half-written under its final name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from common.paths import cache_dir
from worker.jvm.class_archive import ClassArchive, class_archive, create, spark_options

#: a worker's Spark session in a process of its own (PySpark keeps one JVM per process)
SESSION = """
import json, sys
from pathlib import Path
from worker.jvm.class_archive import ClassArchive
from worker.runtime.spark import spark_session, stop_spark
archive = ClassArchive(Path(sys.argv[1]))
spark = spark_session("local[1]", "class-archive", class_archive=archive,
                      conf={"spark.driver.extraJavaOptions":
                            "-Dcoxswain.test=yes -Xlog:cds=warning:stderr"})
try:
    maps = Path(f"/proc/{spark.sparkContext._gateway.proc.pid}/maps").read_text()
    # (the kernel names a mapped file by its resolved path: a cache dir may be a link)
    print(json.dumps({"mapped": str(archive.path.resolve()) in maps,
                      "count": spark.range(3).count(),
                      "options": spark.sparkContext.getConf().get(
                          "spark.driver.extraJavaOptions")}))
finally:
    stop_spark(spark)
"""


def session_with(archive: ClassArchive) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", SESSION, str(archive.path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    # HotSpot says why it left an archive unmapped (a mapping failed once in a suite run)
    result["why"] = "\n".join(line for line in done.stderr.splitlines()
                              if "cds" in line.lower())[-3000:]
    return result


def test_the_driver_jvm_maps_the_archive_made_for_its_java_and_pyspark() -> None:
    # the suite's own (deploy/setup.sh makes it; made here if this checkout has none)
    archive = class_archive(cache_dir() / "jvm")
    assert archive is not None
    assert create(archive, wait=True) and archive.exists
    assert not list(archive.path.parent.glob(f"{archive.path.name}.*.part"))
    session = session_with(archive)
    assert session["mapped"] is True and session["count"] == 3, session["why"]
    # the user's options kept, after ours (theirs win where they overlap)
    options = str(session["options"])
    assert options.index("-XX:SharedArchiveFile=") < options.index("-Dcoxswain.test=yes")


def test_an_archive_hotspot_cannot_use_costs_the_speed_up_not_the_start(
        tmp_path: Path) -> None:
    broken = ClassArchive(tmp_path / "broken.jsa")
    broken.path.write_bytes(b"not a class archive" * 1000)
    session = session_with(broken)
    assert session["mapped"] is False and session["count"] == 3


def test_a_run_that_cannot_dump_leaves_nothing_under_the_final_name(tmp_path: Path) -> None:
    archive = class_archive(tmp_path)
    assert archive is not None
    # a maker killed half-way left its part behind
    archive.path.with_name(f"{archive.path.name}.12345.part").write_bytes(b"half")
    assert not create(archive, master="no-such-master://x", wait=True)
    assert not archive.exists
    # (beside it, the Spark home its JVM ran from: worker.jvm.spark_home)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(archive.path.name)] \
        == [archive.lock.name]


def test_options_join_ours_and_the_users() -> None:
    missing = ClassArchive(Path("/nonexistent/a.jsa"))
    assert spark_options(None, None) is None
    assert spark_options(missing, None) is None  # not made yet: nothing to map
    assert spark_options(missing, "-Xmx2g") == "-Xmx2g"
