"""Stopping a process stops what it started: a worker's Spark JVM must not outlive it."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from service.local.ports import kill_process_group, stop_process_group


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _leader_with_child(ignore_term: bool) -> tuple[subprocess.Popen[bytes], int]:
    """A shell (the leader of its own group) with a child that outlives it on SIGTERM, as
    PySpark's JVM outlives its Python parent for a while."""
    trap = "trap '' TERM; " if ignore_term else ""
    proc = subprocess.Popen(
        ["bash", "-c", f"{trap}sleep 300 & echo $!; wait"],
        stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    assert _alive(child)
    return proc, child


def test_stop_process_group_takes_the_children_along() -> None:
    proc, child = _leader_with_child(ignore_term=False)
    stop_process_group(proc, grace_s=5)  # bash exits on SIGTERM; its sleep would not
    assert proc.returncode == -signal.SIGTERM
    assert not _alive(child)


def test_a_leader_that_ignores_sigterm_is_killed_with_its_children() -> None:
    proc, child = _leader_with_child(ignore_term=True)
    started = time.monotonic()
    stop_process_group(proc, grace_s=0.5)
    assert time.monotonic() - started < 10
    assert proc.returncode == -signal.SIGKILL
    assert not _alive(child)


def test_kill_process_group_is_a_crash_of_the_whole_group() -> None:
    proc, child = _leader_with_child(ignore_term=False)
    kill_process_group(proc.pid)
    assert proc.wait(10) == -signal.SIGKILL
    assert not _alive(child)
    kill_process_group(proc.pid)  # nobody left: nothing to do, no error
    assert os.getpgid(0) != proc.pid  # the caller's own group was never touched
