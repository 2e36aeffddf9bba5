"""The second process of end-to-end tests: ``beside`` tests run there, beside the others,
and each is reported in the run as the test it is (passed, failed with its own report,
skipped); a run of ``beside`` tests alone runs them in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.infra import beside

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """
from tests.infra import background, beside

def pytest_collection_finish(session):
    if not beside.in_lane():
        background.start(session, beside.plan(session))

def pytest_runtest_setup(item):
    if item.get_closest_marker(beside.ALONE) is not None:
        background.wait_all(item.config)

def pytest_sessionfinish(session):
    background.stop(session)
"""

TESTS = """
import os
import time
import pytest
def pid_of(name):
    with open(name + ".pid", "w") as f:
        f.write(str(os.getpid()))

def at(name):
    with open(name + ".at", "w") as f:
        f.write(repr(time.time()))

@pytest.mark.alone
def test_alone_first_in_the_file():
    at("alone")
    pid_of("alone")

def test_here():
    pid_of("here")

@pytest.mark.beside
def test_beside_passes():
    pid_of("passes")
    time.sleep(1)
    print("printed beside")
    at("passes")

@pytest.mark.beside
@pytest.mark.parametrize("n", [1])
def test_beside_fails(n):
    assert n == 2, "wrong n beside"

@pytest.mark.beside
def test_beside_skips():
    pytest.skip("not here")
"""


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_lane.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    beside: x\n    alone: y\n")
    env = {k: v for k, v in os.environ.items() if k not in (beside.IN_LANE, beside.REPORT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**env, "PYTHONPATH": str(ROOT)})


def test_beside_tests_run_in_a_second_process_and_report_here_as_themselves(
    tmp_path: Path,
) -> None:
    out = run(tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "1 failed, 3 passed, 1 skipped" in text, text
    assert "FAILED test_lane.py::test_beside_fails[1]" in text, text
    assert "wrong n beside" in text, text  # the second process's own failure report
    assert "not here" in text, text
    assert text.count("printed beside") == 1, text  # its output, reported here (-rA)
    here, passes = ((tmp_path / f"{n}.pid").read_text() for n in ("here", "passes"))
    assert here != passes  # another process ran it
    # the test marked alone ran last, here, once the second process was done
    assert (tmp_path / "alone.pid").read_text() == here
    assert float((tmp_path / "alone.at").read_text()) > float(
        (tmp_path / "passes.at").read_text())


def test_beside_tests_alone_run_in_the_runs_own_process(tmp_path: Path) -> None:
    out = run(tmp_path, "-m", "beside")
    text = out.stdout + out.stderr
    assert "1 failed, 1 passed, 1 skipped" in text, text
    assert "ran " not in text  # no stand-in reported a second process's run
    assert not (tmp_path / "here.pid").exists()


def test_a_report_names_each_tests_worst_phase(tmp_path: Path) -> None:
    report = tmp_path / "r.jsonl"
    phases = [("a", "setup", "passed", "", "", 1), ("a", "call", "failed", "boom", "o", 2),
              ("a", "teardown", "passed", "", "o2", 0.5), ("b", "setup", "skipped", "why", "", 0)]
    lines = [json.dumps(dict(zip(("nodeid", "when", "outcome", "text", "output", "seconds"),
                                 phase, strict=True))) for phase in phases]
    report.write_text("\n".join(lines) + "\n")
    outcomes = beside.read_report(report)
    assert outcomes["a"] == beside.Outcome("failed", "boom", "o2", 3.5)
    assert outcomes["b"].outcome == "skipped" and outcomes["b"].text == "why"
    assert beside.read_report(tmp_path / "missing.jsonl") == {}
