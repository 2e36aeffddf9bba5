"""``wait_started``: a local service's start returns ready, or leaves nothing running
(its process exited, too slow, or the wait interrupted by Ctrl-C or SIGTERM)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.local.ports import stop_process, wait_started


def started(tmp_path: Path, script: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp_path / "service.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["sh", "-c", script], stdout=out, stderr=subprocess.STDOUT)
    return proc, log


def test_a_ready_service_is_left_running(tmp_path: Path) -> None:
    proc, log = started(tmp_path, "sleep 60")
    stops: list[str] = []
    try:
        wait_started(proc, lambda: True, "svc", log, 5, lambda: stops.append("stop"))
        assert proc.poll() is None and not stops
    finally:
        stop_process(proc)


def test_a_service_that_exits_is_reported_with_its_logs_tail(tmp_path: Path) -> None:
    proc, log = started(tmp_path, "echo cannot bind; exit 3")
    stops: list[str] = []
    proc.wait(10)
    with pytest.raises(RuntimeError, match="svc exited: cannot bind"):
        wait_started(proc, lambda: False, "svc", log, 5, lambda: stops.append("stop"))
    assert stops == ["stop"]


@pytest.mark.parametrize("ending", ["timeout", "interrupt"])
def test_a_start_that_does_not_return_stops_the_process(tmp_path: Path, ending: str) -> None:
    proc, log = started(tmp_path, "sleep 60")

    def ready() -> bool:
        if ending == "interrupt":  # as SIGTERM turns into, in the test run
            raise KeyboardInterrupt
        return False

    expected: type[BaseException] = KeyboardInterrupt if ending == "interrupt" \
        else RuntimeError
    try:
        with pytest.raises(expected):
            wait_started(proc, ready, "svc", log, 0.3, lambda: stop_process(proc))
        assert proc.poll() is not None  # stopped before the error went on
    finally:
        stop_process(proc)


def test_a_starting_coordinators_progress_is_its_cpu_time() -> None:
    """What tests/service/server.py waits on past its answer timeout: a process that
    keeps getting CPU (a starved machine's slow imports) is still starting."""
    from service.local.ports import cpu_seconds

    proc = subprocess.Popen([sys.executable, "-c",
                             "import time\nt = time.process_time()\n"
                             "while time.process_time() - t < 0.5: pass\n"
                             "print('idle', flush=True)\ntime.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "idle\n"  # its busy half is over
        busy = cpu_seconds(proc.pid)
        assert busy >= 0.5
        time.sleep(0.5)  # now it sleeps: no progress
        assert cpu_seconds(proc.pid) - busy < 0.05
    finally:
        proc.kill()
        proc.wait()
    assert cpu_seconds(proc.pid) == 0.0  # gone
