"""A Spark home for the worker's JVM whose Python processes import the compiled PySpark.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on the
``PYTHONPATH`` of every Python process it starts: the executors' Python workers, and the
driver's own for a Python data source (its lookup, its creation, the planning of each read,
the streaming source's runner). Python imports from a zip archive without writing or
reading a bytecode cache: every such process compiles PySpark's modules from source again.
Measured: importing what a data source's planner needs, 0.55 s from the zip against 0.18 s
from the installed package; a newcomer's first batch starts five to seven of them, on the
cores its batch needs (a profile of ``bench.stateful --only scale-out``).

When PySpark is installed from PyPI it sits beside the interpreter already, compiled once.
The home made here mirrors PySpark's own (links to its ``bin``, ``jars`` and the rest)
with an empty ``python/lib``: Spark's processes then import that installed PySpark. Used
only when those processes run an interpreter that has this very PySpark (the worker's
own) and ``SPARK_HOME`` is PySpark's: a Spark distribution of the user's keeps its
archives.

Made once per host and PySpark under the cache, in a folder beside the final name renamed
into place, so a process killed half-way leaves no half-made home under the name others use.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import pyspark

#: what Spark's launcher and JVM look for under their home (all but ``python``)
LINKED = ("bin", "jars", "sbin", "data", "examples", "licenses", "conf")


def pyspark_home() -> Path:
    """The Spark home inside the installed PySpark package."""
    return Path(pyspark.__file__).resolve().parent


def compiled_spark_home(folder: Path, home: Path | None = None) -> Path:
    """The mirror of ``home`` (PySpark's) under ``folder``, made if missing or stale."""
    home = home or pyspark_home()
    fingerprint = hashlib.sha256(f"{home}\n{pyspark.__version__}".encode()).hexdigest()[:16]
    target = folder / f"spark-home-{pyspark.__version__}-{fingerprint}"
    if _is_mirror(target, home):
        return target
    folder.mkdir(parents=True, exist_ok=True)
    part = folder / f"{target.name}.{os.getpid()}.part"
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir()
    for name in LINKED:
        if (home / name).exists():
            (part / name).symlink_to(home / name)
    (part / "python" / "lib").mkdir(parents=True)  # no archives: the installed package
    try:
        os.rename(part, target)
    except OSError:  # made meanwhile by another process (or a stale one is in the way)
        shutil.rmtree(part, ignore_errors=True)
        if not _is_mirror(target, home):
            stale = folder / f"{target.name}.{os.getpid()}.stale"
            os.rename(target, stale)
            shutil.rmtree(stale, ignore_errors=True)
            return compiled_spark_home(folder, home)
    return target


def _is_mirror(target: Path, home: Path) -> bool:
    return (target / "jars").is_symlink() and \
        (target / "jars").resolve() == (home / "jars").resolve() and \
        (target / "python" / "lib").is_dir() and \
        not any((target / "python" / "lib").iterdir())


def spark_home_for(python: str, folder: Path) -> Path | None:
    """The home the worker's JVM should run with: None when ``SPARK_HOME`` names a Spark
    of the user's (kept as it is); else the compiled mirror when its Python processes
    run this interpreter, PySpark's own home (its archives) when they run another (which
    may not have PySpark installed; also when an earlier session of this process set the
    mirror)."""
    configured = os.environ.get("SPARK_HOME")
    if configured and not _is_pysparks(Path(configured)):
        return None
    if Path(python).absolute() != Path(sys.executable).absolute():
        return pyspark_home()
    return compiled_spark_home(folder)


def _is_pysparks(home: Path) -> bool:
    """PySpark's own Spark home, or a mirror of it."""
    return home.resolve() == pyspark_home() or \
        (home / "jars").resolve() == (pyspark_home() / "jars").resolve()


__all__ = ["compiled_spark_home", "pyspark_home", "spark_home_for"]
