"""``coxswain demo`` as a user runs it: real Kafka, coordinator and Spark workers, scaling
1 -> 4 -> 2 while orders flow; every process it started is gone afterwards."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import pytest

from service.local.ports import group_members
from tests.infra import background

pytestmark = pytest.mark.slow

DEMO_ARGS = ["--stage-seconds", "12", "--rate", "150", "--keys", "500"]
DEMO_MARK = "COXSWAIN_TEST_DEMO_RUN"  # inherited by every process a demo run starts


@dataclass
class DemoRun:
    """A ``coxswain demo`` run to its end, and the processes of it still running right
    after (checked at once, by a mark in their environment: the run's other tests start
    and orphan JVMs of their own meanwhile, and pids are reused)."""

    result: subprocess.CompletedProcess[str]
    left_running: list[str]


def run_demo(runner: background.Runner, *args: str) -> DemoRun:
    mark = f"{DEMO_MARK}={uuid.uuid4().hex}"
    name, value = mark.split("=")
    result = runner.run([sys.executable, "-m", "service.cli", "demo", *args], timeout_s=600,
                        env={**os.environ, name: value})
    return DemoRun(result, _marked(mark.encode()))


def _marked(mark: bytes) -> list[str]:
    """The live processes (``pid command``) whose environment holds ``mark``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    marked = mark in f.read().split(b"\0")
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marked and not _zombie(int(entry)):
                found.append(f"{entry} {command[:200]}")
    return found


# each runs its own Kafka, coordinator and workers: run from the start of the test run,
# beside the fast tests (tests/infra/background.py), and checked here
DEMO = background.Job("coxswain demo", lambda runner: run_demo(runner, *DEMO_ARGS),
                      checked_by=("test_demo_scales_while_running_and_stops_everything",))
STATEFUL_DEMO = background.Job(
    "coxswain demo --stateful", lambda runner: run_demo(runner, "--stateful", *DEMO_ARGS),
    checked_by=("test_stateful_demo_splits_and_merges_running_totals_exactly",))
BACKGROUND_JOBS = [DEMO, STATEFUL_DEMO]


def test_demo_scales_while_running_and_stops_everything(request: pytest.FixtureRequest,
                                                       ) -> None:
    demo: DemoRun = background.result(request.config, DEMO)
    result, out = demo.result, demo.result.stdout
    assert result.returncode == 0, out[-4000:] + result.stderr[-4000:]
    assert "POST /scale 4" in out and "POST /scale 2" in out
    # 4 partitions x factor over 2 workers: the table shows each stage's split once its
    # barrier is done
    for factor, tasks in ((1, 2), (4, 8), (2, 4)):
        assert re.search(rf"coxswain demo\s+\d+s\s+elasticity factor {factor}\n"
                         rf".*barrier done.*elasticity factor {factor}.*\n.*\n\n.*\n"
                         rf"worker-1\s+host-1\s+{tasks}\s.*\nworker-2\s+host-2\s+{tasks}\s",
                         out), f"no table for factor {factor}:\n{out[-3000:]}"
    summary = re.search(r"produced ([\d,]+) orders; processed ([\d,]+) distinct "
                        r"\((\d+) duplicates\); per-key order violations: (\d+)", out)
    assert summary, out[-3000:]
    produced, processed = (int(summary[i].replace(",", "")) for i in (1, 2))
    assert produced > 1000 and processed == produced
    assert summary[3] == "0" and summary[4] == "0"  # scale changes cause no duplicates
    assert "every order processed" in out and "stopped" in out
    pids = [int(p) for p in re.findall(r"started pid (\d+)", out)]
    assert len(pids) >= 4  # Kafka, coordinator, two workers
    assert demo.left_running == []  # its Kafka, coordinator, workers and their JVMs


def test_stateful_demo_splits_and_merges_running_totals_exactly(
    request: pytest.FixtureRequest,
) -> None:
    """``demo --stateful``: a running total per customer through 1 -> 4 -> 2; the check
    covers every output record's total and count."""
    demo: DemoRun = background.result(request.config, STATEFUL_DEMO)
    result, out = demo.result, demo.result.stdout
    assert result.returncode == 0, out[-4000:] + result.stderr[-4000:]
    assert "running totals not exactly their orders': 0" in out, out[-3000:]
    assert "every running total exact" in out
    sizes = re.findall(r"state: [\d.,]+ MB in (\d+) tasks", out)
    assert "16" in sizes, sizes[-5:]  # factor 4 over 4 partitions
    assert re.search(r"TASK\s+PROCESSOR\s+STATE KB\nPartition 0_0_4\s+worker-\d\s+\d", out)
    assert demo.left_running == []


def test_sigterm_mid_run_stops_everything_it_started() -> None:
    """SIGTERM while the demo runs stops every process it started, the workers' Spark
    JVMs included: the demo's whole process tree as it was when the signal came, and
    anything left in the process groups of what it started. (Orphaned JVMs anywhere on
    the machine are not the measure: the end-to-end tests beside this one kill workers,
    whose JVMs are orphans for a moment.)"""
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "demo"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    tree: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "started pid" in line and "worker-2" in line:
                break
        else:
            raise AssertionError("the demo did not start its workers:\n" + "".join(lines))
        time.sleep(5)  # the workers' Spark JVMs are up or coming up
        tree = _descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(lines) + rest
    assert proc.returncode == 1, out[-3000:]
    assert "stopped" in out
    started = [int(p) for p in re.findall(r"started pid (\d+)", out)]
    for pid in {*started, *tree}:
        assert not os.path.exists(f"/proc/{pid}") or _zombie(pid), f"pid {pid} still runs"
    for pid in started:  # a worker's JVM stays in its group (the demo starts a session)
        assert group_members(pid) == [], f"pid {pid}'s group still runs"
    kept = re.search(r"logs kept in (\S+)", out)
    assert kept, out[-2000:]
    shutil.rmtree(kept[1])


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process, from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    found[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return found


def _descendants(root: int) -> set[int]:
    """Every process under ``root`` now."""
    parents = _parents()
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found

