"""Self-contained slow work started as the test run starts, beside the fast tests.

The fast tests run first (``tests/conftest.py``), in one process that leaves much of the
machine idle: on 2 cores they use about a third of it, mostly waiting on services. Work that
needs no fixture and runs only processes of its own (the container images' build, a
``coxswain demo`` run) is started then, one job after another in one thread per lane
(work that mostly waits, such as a scenario of timed outages, runs in a lane of its own
beside the CPU-bound builds), and the test that checks it waits for its result instead
of running it. A module declares such work in
``BACKGROUND_JOBS``; a run starts only the jobs of modules it is to run (after -m/-k
selection), and stops a job still running when it ends, whatever happened: its process
group gets SIGTERM, then SIGKILL after a grace, and the job's cleanup runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from service.local.ports import group_members, kill_process_group

GRACE_S = 120.0  # a stopped `coxswain demo` stops its Kafka, coordinator and workers first


class Stopped(RuntimeError):
    """The run ended before the job could start a process."""


class Runner:
    """Runs a job's processes so that the run can stop them: each in its own process
    group, at most one at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: subprocess.Popen[str] | None = None
        self._stopping = threading.Event()

    def run(self, argv: list[str], timeout_s: float,
            **popen: Any) -> subprocess.CompletedProcess[str]:
        """``argv`` run to its end, its output captured; killed (its whole group) after
        ``timeout_s``."""
        with self._lock:
            if self._stopping.is_set():
                raise Stopped(f"the test run ended before {argv[0]} started")
            self._running = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True,
                                             start_new_session=True, **popen)
        proc = self._running
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def stop(self) -> bool:
        """Stop the process running now, if any (SIGTERM to its group, SIGKILL after the
        grace); no process starts after. True if one was running or ended in failure."""
        self._stopping.set()
        with self._lock:
            proc = self._running
        if proc is None:
            return False
        if proc.poll() is None:
            deadline = time.monotonic() + GRACE_S
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
            # the leader's end is not its group's: the others got the signal too, but
            # each ends in its own time (seen: a child still running as the reaped
            # leader's stop returned, on a loaded machine)
            _wait_group_gone(proc.pid, deadline)
            return True
        return proc.returncode != 0


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(pid, signum)


def _wait_group_gone(pgid: int, deadline: float) -> None:
    """Until no live process is left in the group (zombies count as gone: their parent
    is gone too, and it is the reaper's to collect them); SIGKILL at ``deadline``."""
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    kill_process_group(pgid)  # nothing left: nothing to do; else SIGKILL, waited for
    if left := group_members(pgid):
        raise RuntimeError(f"process group {pgid} outlived SIGKILL: {left}")


def _nothing_to_discard(interrupted: bool) -> None:
    """A job whose processes leave nothing behind."""


@dataclass
class Job:
    """A piece of self-contained work: ``work`` runs its processes through the runner it
    is given and returns what its test checks. ``discard`` removes what the work made
    (told whether it was stopped or failed before its end, leaving pieces behind): run
    for every job when the run ends, and when work run in the test itself fails."""

    name: str
    work: Callable[[Runner], Any]
    discard: Callable[[bool], None] = _nothing_to_discard
    #: the names of its module's tests that check it (none: every test of the module)
    checked_by: tuple[str, ...] = ()
    #: jobs of one lane run one after another; lanes side by side
    lane: str = "build"
    #: whether the end-to-end tests wait for it before they start (False: it is meant
    #: to run beside them, as ``tests/infra/beside.py``'s tests do)
    waited_for: bool = True

    def wanted_by(self, item: pytest.Item) -> bool:
        name = getattr(item, "originalname", item.name)
        return not self.checked_by or name in self.checked_by


@dataclass
class _Outcome:
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None
    seconds: float | None = None  # how long the job ran


class Background:
    """Jobs run one after another in one thread per lane, from ``start()``."""

    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = {job.name: job for job in jobs}
        self._outcomes = {job.name: _Outcome() for job in jobs}
        lanes = sorted({job.lane for job in jobs})
        self._runners = {lane: Runner() for lane in lanes}
        self._threads = [threading.Thread(
            target=self._run_all, args=([j for j in jobs if j.lane == lane],
                                        self._runners[lane]),
            name=f"background-{lane}", daemon=True) for lane in lanes]
        self._waited_for = [thread for thread, lane in zip(self._threads, lanes, strict=True)
                            if all(j.waited_for for j in jobs if j.lane == lane)]
        self._closed = False
        self._started = time.monotonic()
        self.waited_s: float | None = None  # how long the end-to-end tests waited
        self._waited_at = 0.0

    def start(self) -> Background:
        self._started = time.monotonic()
        for thread in self._threads:
            thread.start()
        return self

    def summary(self) -> list[str]:
        """One line per job (its lane and duration) and the end-to-end tests' wait: how
        the suite's time is spent beside the fast tests (CI's budget)."""
        lines = [f"{name} ({job.lane}): " + (
            f"{self._outcomes[name].seconds:.0f} s" if self._outcomes[name].seconds
            is not None else "not done") for name, job in self.jobs.items()]
        if self.waited_s is not None:
            lines.append(f"the end-to-end tests waited {self.waited_s:.0f} s for them, "
                         f"{self._waited_at:.0f} s into the run")
        return lines

    def has(self, name: str) -> bool:
        return name in self.jobs

    def result(self, name: str, timeout_s: float = 3600) -> Any:
        """The job's result once it is done; the job's error if it failed."""
        outcome = self._outcomes[name]
        if not outcome.done.wait(timeout_s):
            raise TimeoutError(f"background job {name!r} not done within {timeout_s:.0f} s")
        if outcome.error is not None:
            raise outcome.error
        return outcome.value

    def wait(self) -> None:
        """Until every job the end-to-end tests wait for is done (or stopped)."""
        began = time.monotonic()
        for thread in self._waited_for:
            thread.join()
        if self.waited_s is None:
            self.waited_s = time.monotonic() - began
            self._waited_at = began - self._started

    def wait_all(self) -> None:
        """Until every job is done (or stopped), the second lane's included."""
        for thread in self._threads:
            thread.join()

    def close(self) -> None:
        """Stop what still runs and discard what every job made. Idempotent."""
        if self._closed:
            return
        self._closed = True
        stopped = any([runner.stop() for runner in self._runners.values()])
        for thread in self._threads:
            thread.join(GRACE_S)
        for name, job in self.jobs.items():
            outcome = self._outcomes[name]
            interrupted = not outcome.done.is_set() or outcome.error is not None
            job.discard(interrupted or stopped)

    def _run_all(self, jobs: list[Job], runner: Runner) -> None:
        for job in jobs:
            outcome = self._outcomes[job.name]
            began = time.monotonic()
            try:
                outcome.value = job.work(runner)
            except BaseException as e:  # handed to the test that waits, in the main thread
                outcome.error = e
            finally:
                outcome.seconds = time.monotonic() - began
                outcome.done.set()


# where the run keeps its background jobs (tests/conftest.py) for the tests that check them
BACKGROUND = pytest.StashKey[Background]()


def start(session: pytest.Session, more: list[Job] | None = None) -> None:
    """Start the ``BACKGROUND_JOBS`` that the tests the run is to run check, in run order,
    and ``more``."""
    if session.config.option.collectonly:
        return
    jobs: list[Job] = list(more or ())
    for item in session.items:
        module = getattr(item, "module", None)
        for job in getattr(module, "BACKGROUND_JOBS", ()):
            if job not in jobs and job.wanted_by(item):
                jobs.append(job)
    if jobs:
        session.config.stash[BACKGROUND] = Background(jobs).start()


def wait(config: pytest.Config) -> None:
    """Until the run's background jobs are done: the end-to-end tests do not share the
    machine with them (in a run of those alone, the first waits for the jobs)."""
    background = config.stash.get(BACKGROUND, None)
    if background is not None:
        background.wait()


def wait_all(config: pytest.Config) -> None:
    """Until every background job is done, those the end-to-end tests do not wait for
    included: for a test that loads the machine itself (``alone``)."""
    background = config.stash.get(BACKGROUND, None)
    if background is not None:
        background.wait_all()


def summary(config: pytest.Config) -> list[str]:
    """The run's background jobs' durations, and the end-to-end tests' wait for them."""
    background = config.stash.get(BACKGROUND, None)
    return [] if background is None else background.summary()


def stop(session: pytest.Session) -> None:
    background = session.config.stash.get(BACKGROUND, None)
    if background is not None:
        background.close()


def result(config: pytest.Config, job: Job) -> Any:
    """What ``job`` gave: from the run's background when it started it there, else run
    now (a test run on its own, or one the run did not plan for)."""
    background = config.stash.get(BACKGROUND, None)
    if background is not None and background.has(job.name):
        return background.result(job.name)
    runner = Runner()
    try:
        return job.work(runner)
    except BaseException:
        runner.stop()
        job.discard(True)
        raise
