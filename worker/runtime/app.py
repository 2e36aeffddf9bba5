"""The user's app: imported on the driver, shipped to the executors, and imported there
once before the first batch, so a module an executor cannot import stops the worker in
seconds with a clear message instead of failing its first batch four times over.

On a local master the executors are threads of the driver's JVM whose Python workers
start from the driver's directory and path: nothing needs shipping. On a cluster they run
on other hosts, in a work folder of their own, so the app's code has to travel with the
application (Spark's ``addPyFile``). What an installed distribution provides (Coxswain
itself, pandas, the user's own wheels) is not shipped: every executor host installs it,
at the interpreter path the executors run (``PYSPARK_PYTHON``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import os
import re
import socket
import sys
import time
import traceback
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import SparkSession

from worker.cut_signals import unreachable

log = logging.getLogger("coxswain.worker")

#: what ``--py-files`` takes, as spark-submit does
PY_FILE_SUFFIXES = (".py", ".zip", ".egg")
_LOCAL_MASTER = re.compile(r"local(\[(\d+|\*)(,\s*\d+)?\])?$")


class AppError(Exception):
    """The app cannot run: on the driver, or on an executor (the message says which)."""


def is_local_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local[*]``, ``local[N,F]``: executors in the driver's
    JVM, Python workers on the driver's host (``local-cluster`` is not: its executors
    are processes of their own)."""
    return _LOCAL_MASTER.match(master.strip()) is not None


def parse_app(spec: str) -> tuple[str, str]:
    """``module:function`` into its two names."""
    module, sep, name = spec.partition(":")
    if not sep or not module or not name.isidentifier():
        raise AppError(f"--app must look like module:function, not {spec!r}")
    return module, name


def py_files(specs: Iterable[str]) -> list[Path]:
    """``--py-files`` values (each comma-separated, as spark-submit's) as existing files."""
    files: list[Path] = []
    for spec in specs:
        for part in filter(None, (s.strip() for s in spec.split(","))):
            path = Path(part).expanduser().resolve()
            if path.suffix not in PY_FILE_SUFFIXES:
                raise AppError(f"--py-files takes .py, .zip or .egg files, not {part}")
            if not path.is_file():
                raise AppError(f"--py-files: {part} is not a file")
            files.append(path)
    return files


def load_app(spec: str, extra_paths: Sequence[Path] = ()) -> tuple[str, Callable[..., Any]]:
    """Import ``module:function`` on the driver: from the current directory (as ``python
    -m`` and spark-submit do; after the installed packages, so a file there never shadows
    them) and ``--py-files``."""
    module, name = parse_app(spec)
    for path in (Path.cwd(), *(p if p.suffix != ".py" else p.parent for p in extra_paths)):
        if str(path) not in sys.path:
            sys.path.append(str(path))
    try:
        loaded = importlib.import_module(module)
    except Exception as e:  # any error of the user's module is reported
        raise AppError(f"--app {spec}: importing {module} failed on the driver: "
                       f"{type(e).__name__}: {e} (it is looked for in the current "
                       "directory, --py-files and the installed packages)") from e
    function = getattr(loaded, name, None)
    if not callable(function):
        raise AppError(f"--app {spec}: {module} has no function {name}")
    return module, function


@dataclass(frozen=True)
class Shipment:
    """What the executors get: the app's own code and ``--py-files``."""

    files: tuple[Path, ...]

    def add_to(self, spark: SparkSession) -> None:
        for path in self.files:
            spark.sparkContext.addPyFile(str(path))
        if self.files:
            log.info("shipped to the executors: %s", ", ".join(p.name for p in self.files))


def shipment(module: str, extra: Sequence[Path], folder: Path, master: str) -> Shipment:
    """What to ship: ``extra``, and on a cluster ``master`` the app's code (its top-level
    package zipped into ``folder``, or its one module file) unless an installed
    distribution provides it."""
    top = module.split(".", maxsplit=1)[0]
    files = list(extra)
    installed = (top in importlib.metadata.packages_distributions()
                 or top in sys.stdlib_module_names)
    if is_local_master(master) or installed:
        return Shipment(tuple(files))
    spec = importlib.util.find_spec(top)
    origin = Path(spec.origin) if spec is not None and spec.origin else None
    if origin is None or origin.suffix != ".py":
        return Shipment(tuple(files))  # a namespace package or an extension: not ours to zip
    if spec is not None and spec.submodule_search_locations:  # a package: zip it whole
        own = zip_package(origin.parent, folder)
    else:
        own = origin
    # named in --py-files too: shipped once (Spark refuses a second file of one name,
    # "has been added already")
    if not any(f.name == own.name for f in files):
        files.insert(0, own)
    return Shipment(tuple(files))


def zip_package(package: Path, folder: Path) -> Path:
    """``package``'s Python files in a zip under ``folder`` (written beside, then renamed:
    never a half-written archive under the name Spark reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{package.name}.zip"
    part = target.with_suffix(".zip.part")
    with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package.rglob("*")):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            archive.write(path, str(path.relative_to(package.parent)))
    os.replace(part, target)
    return target


def check_on_executors(spark: SparkSession, module: str, function: str,
                       signals: str | None = None) -> list[str]:
    """Import ``module`` in one Python worker per core of the executors, the kind
    ``process_task`` runs in (pandas and pyarrow loaded: they stay warm for the first
    batch). An executor that cannot import it reports the error instead of failing its
    Spark task, so Spark does not retry it: :class:`AppError` in seconds, naming the host.
    Executors that cannot read the driver's cut ``signals`` are logged (a warning: such
    batches are never cut short, which is correct, only slower to hand over). Returns
    the executors' hosts."""
    started = time.monotonic()
    cores = max(1, spark.sparkContext.defaultParallelism)
    rows = (spark.range(cores, numPartitions=cores)
            .mapInPandas(_import_here(module, function, signals),
                         "host string, error string, signals string")
            .collect())
    blind = [r for r in rows if r["signals"]]
    if blind:
        log.warning("%d of %d executor Python workers cannot read the driver's cut signals "
                    "at %s (on %s: %s): their batches are not cut short, so a handover "
                    "waits for the batch in flight (reach the driver from the executors, "
                    "spark.driver.host)", len(blind), len(rows), signals, blind[0]["host"],
                    blind[0]["signals"])
    failures = [r for r in rows if r["error"]]
    if failures:
        raise AppError(
            f"the app's module {module} cannot be imported on the executors ({len(failures)} "
            f"of {len(rows)} Python workers; on {failures[0]['host']}: "
            f"{failures[0]['error']}). Ship what it needs with --py-files (a .py file, or a "
            ".zip of a package), or install it on every executor host for the interpreter "
            "the executors run (--executor-python)")
    hosts = sorted({str(r["host"]) for r in rows})
    log.info("the app imports on the executors (%d Python workers on %s) in %.1fs",
             len(rows), ", ".join(hosts), time.monotonic() - started)
    return hosts


def _import_here(module: str, function: str, signals: str | None
                 ) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for _ in batches:
            pass
        error = ""
        try:
            loaded = importlib.import_module(module)
            if not callable(getattr(loaded, function, None)):
                error = f"{module} has no function {function}"
        except Exception as e:  # reported to the driver, not raised
            error = traceback.format_exception_only(type(e), e)[-1].strip()
        blind = unreachable(signals) if signals else ""
        yield pd.DataFrame({"host": [socket.gethostname()], "error": [error],
                            "signals": [blind]})

    return run
