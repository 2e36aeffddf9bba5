"""A class-data-sharing archive for the worker's Spark JVM: a faster cold start.

A worker's driver JVM loads and verifies some 15 000 classes before its first batch; on a
small host that is most of the 15-20 s a worker takes to start (a replacement worker's
start is part of every failover it serves). HotSpot can map those classes, already parsed
and verified, from an archive made by an earlier run (JDK 13+ dynamic CDS,
``-XX:ArchiveClassesAtExit`` once, then ``-XX:SharedArchiveFile``): measured here, a
``local[2]`` session with the executors' import check in 11 s instead of 16 s
(``bench/worker_start.py``).

The archive is only valid for the JVM build and class path that made it, so its file name
carries a fingerprint of both (the ``java`` binary Spark runs and PySpark's jars). HotSpot
checks the rest itself: an archive it cannot use is ignored (``-Xshare:auto``, the
default), never an error, so a stale one costs the speed-up, never a start.

Made once per host by ``python -m worker.jvm.make_class_archive`` (``deploy/setup.sh``
runs it after installing the worker): a short Spark run of a worker's start in a child
process, under a lock, its dump written beside the final name and renamed once the JVM
that wrote it exited cleanly, so a run killed half-way leaves no half-written archive
under the name JVMs read. Workers only read it (``coxswain worker --jvm-class-archive``):
making one costs a minute of CPU, no worker's start should pay that.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyspark

log = logging.getLogger("coxswain.worker")

#: HotSpot's own notes about the archive (classes it skips while dumping, an archive it
#: cannot map) are expected, not news: without this they land in the worker's log
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


@dataclass(frozen=True)
class ClassArchive:
    """The archive for this host's JVM and PySpark, at ``path`` once made."""

    path: Path

    @property
    def exists(self) -> bool:
        return self.path.is_file() and self.path.stat().st_size > 0

    def java_options(self) -> str:
        """The driver's JVM options that use the archive ("" until it is made)."""
        return f"-XX:SharedArchiveFile={self.path} {QUIET}" if self.exists else ""

    @property
    def lock(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")


def java_binary() -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the PATH's."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def class_archive(folder: Path) -> ClassArchive | None:
    """The archive for this host's JVM and PySpark under ``folder`` (None without java)."""
    java = java_binary()
    if java is None:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    parts = [str(java), str(java.stat().st_size), str(java.stat().st_mtime_ns),
             str(jars), pyspark.__version__]
    # the JVM's own modules file: an upgraded JDK package keeps bin/java's size and time
    modules = java.parent.parent / "lib" / "modules"
    if modules.exists():
        parts += [str(modules.stat().st_size), str(modules.stat().st_mtime_ns)]
    fingerprint = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
    return ClassArchive(folder / f"spark-{pyspark.__version__}-{fingerprint}.jsa")


def spark_options(archive: ClassArchive | None, user_options: str | None) -> str | None:
    """``spark.driver.extraJavaOptions``: the archive's, then the user's (theirs win)."""
    ours = archive.java_options() if archive is not None else ""
    joined = " ".join(o for o in (ours, user_options or "") if o)
    return joined or None


def create(archive: ClassArchive, master: str = "local[2]", wait: bool = False) -> bool:
    """Make ``archive`` unless it exists or (without ``wait``) another process is making
    it: a short Spark run of what a worker's start does (a session, a pandas job on
    Python workers, a streaming query), its classes dumped as its JVM exits. True when it
    exists after."""
    archive.path.parent.mkdir(parents=True, exist_ok=True)
    with archive.lock.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            log.info("another process is making the JVM class archive %s", archive.path)
            return False
        if archive.exists:
            return True
        for stale in archive.path.parent.glob(f"{archive.path.name}.*.part"):
            stale.unlink()  # a killed maker's (the lock is ours: none is being written)
        part = archive.path.with_name(f"{archive.path.name}.{os.getpid()}.part")
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "worker.jvm.make_class_archive",
                               "--dump-to", str(part), "--master", master],
                              stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, check=False)
        if done.returncode != 0 or not part.is_file() or part.stat().st_size == 0:
            part.unlink(missing_ok=True)
            log.warning("could not make the JVM class archive %s (exit %d: %s); workers "
                        "start without one", archive.path, done.returncode,
                        done.stderr[-2000:])
            return False
        os.replace(part, archive.path)
        for old in archive.path.parent.glob("spark-*.jsa"):
            if old != archive.path:  # an earlier Java's or PySpark's: 160 MB each
                old.unlink(missing_ok=True)
        log.info("made the JVM class archive %s (%.0f MB) in %.0fs", archive.path,
                 archive.path.stat().st_size / 1e6, time.monotonic() - started)
        return True
