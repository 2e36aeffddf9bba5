"""The background jobs' runner: results in order, a stop that takes the job's process
group along and discards what it made, and jobs started only for the tests that check
them."""

from __future__ import annotations

import os
import sys
import time
import uuid
from types import SimpleNamespace
from typing import Any

from tests.infra.background import Background, Job, Runner


def echo(text: str) -> Job:
    return Job(f"echo {text}", lambda runner: runner.run(["echo", text], timeout_s=30).stdout)


def test_jobs_run_one_after_another_and_give_their_results() -> None:
    background = Background([echo("a"), echo("b")]).start()
    try:
        assert background.result("echo a") == "a\n"
        assert background.result("echo b") == "b\n"
    finally:
        background.close()


def test_jobs_of_two_lanes_run_side_by_side_and_one_lane_in_order() -> None:
    def sleep(name: str, lane: str) -> Job:
        def work(runner: Runner) -> float:
            runner.run(["sleep", "1"], timeout_s=30)
            return time.monotonic()
        return Job(name, work, lane=lane)

    started = time.monotonic()
    background = Background([sleep("a1", "a"), sleep("a2", "a"), sleep("b1", "b")]).start()
    try:
        a1, a2, b1 = (background.result(n) - started for n in ("a1", "a2", "b1"))
        assert a1 < a2 and a2 >= 2.0  # one lane: one after another
        assert b1 < 1.9  # the other lane beside it
        background.wait()
    finally:
        background.close()


def test_a_stop_takes_the_jobs_process_group_along_and_discards_what_it_made() -> None:
    discarded: list[bool] = []
    child_pid: list[int] = []

    # a duration no other test's sleeper has (the suite's other process runs its own
    # tests meanwhile: one found another test's ``sleep 300``, which this stop leaves)
    nap = f"300.{uuid.uuid4().int % 10**6:06d}"

    def sleeper(runner: Runner) -> Any:
        # a process whose child sleeps: both are in the job's process group
        return runner.run([sys.executable, "-c",
                           f"import subprocess, sys; p = subprocess.Popen(['sleep', '{nap}']);"
                           " print(p.pid, flush=True); p.wait()"], timeout_s=300)

    job = Job("sleeper", sleeper, discard=discarded.append)
    background = Background([job]).start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the child runs
        found = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p) == f"sleep {nap}"]
        if found:
            child_pid.append(int(found[0]))
            break
        time.sleep(0.1)
    assert child_pid, "the job's process never started its child"
    background.close()
    assert discarded == [True]
    assert not os.path.exists(f"/proc/{child_pid[0]}") or _state(child_pid[0]) == "Z"
    result = background.result("sleeper", timeout_s=5)
    assert result.returncode != 0  # stopped, not finished


def test_a_stop_waits_for_a_child_that_takes_its_time_to_end() -> None:
    # the job's leader ends at once on SIGTERM, its child a second later (as a broker
    # that logs to a file shuts down: it holds none of the job's pipes, so the leader's
    # output ends with the leader): the stop returns when the child has ended too
    def slow_child(runner: Runner) -> Any:
        return runner.run(["bash", "-c", "bash -c 'exec >/dev/null 2>&1; "
                           "trap \"sleep 1; exit 0\" TERM; sleep 300 & wait' & wait"],
                          timeout_s=300)

    background = Background([Job("slow child", slow_child)]).start()
    try:
        deadline = time.monotonic() + 30
        child: list[int] = []
        while not child and time.monotonic() < deadline:  # its trap is set up then
            child = [int(p) for p in os.listdir("/proc") if p.isdigit()
                     and _cmdline(p).startswith("bash -c exec >/dev/null")
                     and any(_cmdline(c) == "sleep 300" for c in _children(p))]
            time.sleep(0.1)
        assert child, "the job's process never started its child"
        started = time.monotonic()
    finally:
        background.close()
    assert time.monotonic() - started >= 0.9  # it waited for the child's second
    assert not os.path.exists(f"/proc/{child[0]}") or _state(child[0]) == "Z"


def test_jobs_start_only_for_the_tests_that_check_them() -> None:
    job = Job("demo", lambda runner: None, checked_by=("test_demo",))
    whole_module = Job("images", lambda runner: None)
    assert job.wanted_by(_item("test_demo")) and not job.wanted_by(_item("test_sigterm"))
    assert whole_module.wanted_by(_item("test_sigterm"))


def _item(name: str) -> Any:
    return SimpleNamespace(originalname=name, name=name)


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _children(pid: str) -> list[str]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return f.read().split()
    except OSError:
        return []


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0]
    except OSError:
        return "gone"
