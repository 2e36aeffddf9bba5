"""The background jobs' runner: results in order, a stop that takes the job's process
group along and discards what it made, and jobs started only for the tests that check
them."""

from __future__ import annotations

import os
import sys
import time
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


def test_a_stop_takes_the_jobs_process_group_along_and_discards_what_it_made() -> None:
    discarded: list[bool] = []
    child_pid: list[int] = []

    def sleeper(runner: Runner) -> Any:
        # a process whose child sleeps: both are in the job's process group
        return runner.run([sys.executable, "-c",
                           "import subprocess, sys; p = subprocess.Popen(['sleep', '300']);"
                           " print(p.pid, flush=True); p.wait()"], timeout_s=300)

    job = Job("sleeper", sleeper, discard=discarded.append)
    background = Background([job]).start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the child runs
        found = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p) == "sleep 300"]
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


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0]
    except OSError:
        return "gone"
