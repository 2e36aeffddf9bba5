"""End-to-end tests run in a second pytest process beside the rest of the run.

An end-to-end test mostly waits on its own services (a broker, a coordinator, Spark
queries that run a batch every few seconds): one keeps about one of CI's 2 cores busy,
and they ran one after another, so the other core idled through half the suite. Tests
marked ``beside`` run in a second pytest process instead, started as the run starts (a
background job of its own lane, ``tests/infra/background.py``), with its own Kafka,
ZooKeeper, PostgreSQL, S3 and Kinesis servers (the session fixtures, started there), while
this process runs the fast tests and the other end-to-end tests. Each is still a test of
this run: the item left in its place waits for the second process and reports that test's
outcome, its failure text and output.

Both processes share the machine, as on a loaded host: a test marked ``beside`` must pick
its ports, names and folders so that another test's cannot meet them (the session's
services do), and every end-to-end test already passes beside ``stress-ng --cpu 4``.
A run of ``beside`` tests alone (``pytest tests/chaos``) runs them here as usual.

A test marked ``alone`` loads the machine itself (CPU hogs): beside the other lane it
would starve that lane's timing, so it runs last, here, once the second process is done
(its stand-ins wait for it; ``tests/conftest.py`` waits for every background job too).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.infra import background

MARK = "beside"
#: the tests that run last, with the machine to themselves
ALONE = "alone"
LANE = "beside"
#: set in the second process: there the tests run (and nothing more is started beside)
IN_LANE = "COXSWAIN_TEST_BESIDE"
#: where the second process's plugin (this module, ``-p tests.infra.beside``) writes
REPORT = "COXSWAIN_TEST_BESIDE_REPORT"
TIMEOUT_S = 3000.0


@dataclass
class Outcome:
    """One test's result in the second process: its worst phase's."""

    outcome: str  # passed, failed, skipped
    text: str = ""  # the failure's (or skip's) report
    output: str = ""  # what the test printed
    seconds: float = 0.0


@dataclass
class LaneRun:
    """The second process's end and every test's outcome in it."""

    returncode: int
    output: str
    outcomes: dict[str, Outcome]


def in_lane() -> bool:
    return bool(os.environ.get(IN_LANE))


# ------------------------------------------------------------- the second process's side
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each phase's report, one JSON line each, appended to the run's report file."""
    path = os.environ.get(REPORT)
    if not path:
        return
    text = report.longreprtext if not report.passed else ""
    if report.skipped and isinstance(report.longrepr, tuple):
        text = report.longrepr[2]  # (file, line, "Skipped: why")
    line = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
            "text": text,
            "output": report.capstdout + report.capstderr,
            "seconds": report.duration}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")


def read_report(path: Path) -> dict[str, Outcome]:
    """The outcome of every test the report names: failed if any phase failed, skipped
    if one was skipped (and none failed), else passed."""
    rank = {"passed": 0, "skipped": 1, "failed": 2}
    outcomes: dict[str, Outcome] = {}
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    for raw in text.splitlines():
        line = json.loads(raw)
        seen = outcomes.setdefault(line["nodeid"], Outcome("passed"))
        seen.seconds += line["seconds"]
        if line["output"]:
            seen.output = line["output"]  # a phase's report holds its earlier phases' too
        if rank[line["outcome"]] > rank[seen.outcome]:
            seen.outcome, seen.text = line["outcome"], line["text"]
    return outcomes


# --------------------------------------------------------------------- this process's side
def lane_job(nodeids: list[str], root: Path) -> background.Job:
    """The job that runs ``nodeids`` in a second pytest process (in their order)."""
    report_dir = Path(tempfile.mkdtemp(prefix="coxswain-beside-"))

    def work(runner: background.Runner) -> LaneRun:
        report = report_dir / "report.jsonl"
        run = runner.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "-p", "tests.infra.beside", *nodeids], timeout_s=TIMEOUT_S, cwd=root,
            env={**os.environ, IN_LANE: "1", REPORT: str(report)})
        return LaneRun(run.returncode, run.stdout + run.stderr, read_report(report))

    def discard(interrupted: bool) -> None:
        for f in report_dir.iterdir():
            f.unlink()
        report_dir.rmdir()

    return background.Job(f"{len(nodeids)} end-to-end tests beside", work, discard,
                          lane=LANE, waited_for=False)


class BesideItem(pytest.Item):
    """A test run by the second process: its outcome there, reported here."""

    def __init__(self, *, job: background.Job, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job = job

    def runtest(self) -> None:
        run: LaneRun = background.result(self.config, self.job)
        outcome = run.outcomes.get(self.nodeid)
        if outcome is None:
            raise BesideFailure(f"{self.nodeid} did not run in the second process "
                                f"(exit {run.returncode}):\n{run.output[-6000:]}")
        if outcome.output:
            print(outcome.output)  # shown with a failure, and with -s / -rP
        print(f"ran {outcome.seconds:.1f} s beside the run")
        if outcome.outcome == "skipped":
            pytest.skip(outcome.text)
        if outcome.outcome == "failed":
            raise BesideFailure(outcome.text)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, BesideFailure):
            return str(excinfo.value)  # the second process's report, as it gave it
        return str(super().repr_failure(excinfo, style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name


class BesideFailure(Exception):
    """The test failed in the second process (its report is the message)."""


def plan(session: pytest.Session) -> list[background.Job]:
    """Move the run's ``beside`` tests to a second process, when it has other tests to
    run beside them: their items become :class:`BesideItem` at the run's end, and the
    job that runs them is returned (none in the second process itself)."""
    if in_lane() or session.config.option.collectonly:
        return []
    alone = [item for item in session.items if item.get_closest_marker(ALONE)]
    if alone:  # last, whatever else the run holds
        session.items[:] = [i for i in session.items if i not in alone] + alone
    marked = [item for item in session.items if item.get_closest_marker(MARK)]
    if not marked or len(marked) == len(session.items):
        return []
    job = lane_job([item.nodeid for item in marked], Path(str(session.config.rootpath)))
    assert not any(item.get_closest_marker(ALONE) for item in marked), \
        "a test is marked both beside and alone"
    kept = [item for item in session.items
            if not item.get_closest_marker(MARK) and item not in alone]
    moved: list[pytest.Item] = []
    for item in marked:
        assert item.parent is not None
        stand_in = BesideItem.from_parent(item.parent, name=item.name, job=job)
        stand_in.own_markers.extend(item.own_markers)  # the module's: from the parent
        moved.append(stand_in)
    session.items[:] = kept + moved + alone
    return [job]
