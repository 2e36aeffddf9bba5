"""The worker JVM's Spark home whose Python processes import the installed PySpark (not
PySpark's zip archive, compiled again by every process): made once, replaced when stale,
used only where the installed PySpark is the interpreter's own, and seen by a real JVM
and its Python workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.jvm.spark_home import compiled_spark_home, pyspark_home, spark_home_for


def test_the_mirror_links_pysparks_home_without_its_python_archives(tmp_path: Path) -> None:
    home = compiled_spark_home(tmp_path)
    assert (home / "jars").resolve() == pyspark_home() / "jars"
    assert (home / "bin" / "spark-submit").resolve() == pyspark_home() / "bin" / "spark-submit"
    assert (pyspark_home() / "python" / "lib" / "pyspark.zip").exists()  # what it leaves out
    assert list((home / "python" / "lib").iterdir()) == []
    assert compiled_spark_home(tmp_path) == home  # made once
    assert [p.name for p in tmp_path.iterdir()] == [home.name]  # nothing half-made left


def test_a_stale_mirror_is_made_again(tmp_path: Path) -> None:
    home = compiled_spark_home(tmp_path)
    (home / "jars").unlink()
    (home / "jars").symlink_to(tmp_path)  # (another PySpark's, say)
    assert compiled_spark_home(tmp_path) == home
    assert (home / "jars").resolve() == pyspark_home() / "jars"


def test_only_this_interpreter_with_pysparks_own_home_gets_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    assert spark_home_for(sys.executable, tmp_path) is not None
    monkeypatch.setenv("SPARK_HOME", str(pyspark_home()))
    assert spark_home_for(sys.executable, tmp_path) is not None
    # a Spark distribution of the user's, or workers running another interpreter (which
    # may not have PySpark installed): the archives stay
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert spark_home_for(sys.executable, tmp_path / "homes") is None
    monkeypatch.delenv("SPARK_HOME")
    assert spark_home_for("/usr/bin/python3", tmp_path) == pyspark_home()
    # a session of this process set the mirror before: another interpreter gets
    # PySpark's own home back, this one the mirror again
    monkeypatch.setenv("SPARK_HOME", str(compiled_spark_home(tmp_path)))
    assert spark_home_for("/usr/bin/python3", tmp_path) == pyspark_home()
    assert spark_home_for(sys.executable, tmp_path) == compiled_spark_home(tmp_path)


#: a worker's Spark session in a process of its own (PySpark keeps one JVM per process)
SESSION = """
import json, sys
from pathlib import Path
from worker.runtime.spark import spark_session, stop_spark

def where(batches):
    import os, pandas as pd, pyspark, sys
    for _ in batches:
        pass
    # (Spark still names $SPARK_HOME/python/lib/pyspark.zip on the path: missing there)
    yield pd.DataFrame({"file": [pyspark.__file__], "zips": [",".join(
        p for p in sys.path if p.endswith("pyspark.zip") and os.path.exists(p))]})

spark = spark_session("local[1]", "spark-home", spark_homes=Path(sys.argv[1]))
try:
    row = spark.range(1, numPartitions=1).mapInPandas(where, "file string, zips string") \\
        .collect()[0]
    print(json.dumps({"home": spark.sparkContext._jvm.System.getenv("SPARK_HOME"),
                      "file": row["file"], "zips": row["zips"]}))
finally:
    stop_spark(spark)
"""


def test_sparks_python_workers_import_the_installed_pyspark(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_HOME"}
    done = subprocess.run([sys.executable, "-c", SESSION, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(seen["home"]) == compiled_spark_home(tmp_path)
    assert Path(seen["file"]).resolve() == pyspark_home() / "__init__.py"
    assert seen["zips"] == ""
