"""SIGTERM to a test run (``tests.infra.sigterm``): the running test's ``finally`` blocks
and every fixture's teardown run, so the processes the tests started are stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: a session fixture and a running test, each holding a process of its own (by pid)
RUN = """
import subprocess
import time

import pytest


@pytest.fixture(scope="session")
def service(tmp_path_factory):
    proc = subprocess.Popen(["sleep", "600"])
    (tmp_path_factory.getbasetemp().parent / "service.pid").write_text(str(proc.pid))
    yield proc
    proc.terminate()
    proc.wait()
    (tmp_path_factory.getbasetemp().parent / "service.stopped").write_text("yes")


def test_runs_long(service, tmp_path_factory):
    proc = subprocess.Popen(["sleep", "600"])
    try:  # the pid is told from inside: a SIGTERM once it is known meets this finally
        (tmp_path_factory.getbasetemp().parent / "own.pid").write_text(str(proc.pid))
        time.sleep(600)
    finally:
        proc.terminate()
        proc.wait()
"""


def test_sigterm_runs_the_tests_finally_blocks_and_fixture_teardowns(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(RUN))
    base = tmp_path / "base" / "run"
    base.parent.mkdir()
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", os.devnull,
         "-p", "tests.infra.sigterm", "--rootdir", str(tmp_path), "--basetemp", str(base),
         str(tmp_path / "test_inner.py")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pid_files = (base.parent / "service.pid", base.parent / "own.pid")
    try:
        deadline = time.monotonic() + 60
        # own.pid is written inside the test's try, after the fixture yielded: both
        # processes' stops are armed once it exists
        while not all(p.exists() and p.read_text() for p in pid_files):
            assert run.poll() is None, run.communicate()[0].decode()
            assert time.monotonic() < deadline, "the inner test never started"
            time.sleep(0.1)
        pids = [int(p.read_text()) for p in pid_files]
        run.send_signal(signal.SIGTERM)
        out = run.communicate(timeout=60)[0].decode()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 2, out  # pytest's "interrupted"
    assert "stopping the test run" in out, out
    assert (base.parent / "service.stopped").exists(), out  # the fixture's teardown ran
    for pid in pids:  # both processes stopped (and reaped) by their owners
        assert not Path(f"/proc/{pid}").exists(), (pid, out)
