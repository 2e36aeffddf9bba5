"""The README's five-minute quickstart, run as its Markdown says (issue #50): its commands
are extracted from the README, not copied here, and run exactly as written, each in the
order given, with their output checked: `coxswain dev up`, `serve`, `dev produce`, the
first job on a worker, `scale 4` and `status`.

They use the fixed ports a first try has (ZooKeeper 2181, Kafka 9092, the coordinator
8080): the run gets a network namespace of its own (loopback only), so they meet no
other test's services and no broker this machine runs. The install command
(`./deploy/setup.sh --dev`) is the one the test suite itself ran.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Five minutes: a first job"


def quickstart_commands(readme: str) -> list[str]:
    """The shell commands of the README's quickstart section, in order: each line of its
    ``sh`` blocks, continuation lines joined, comments dropped."""
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + len(SECTION))
    section = readme[start:end if end >= 0 else None]
    commands: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            command = line.split(" #", 1)[0].strip()
            if command:
                commands.append(" ".join(command.split()))
    return commands


def test_the_quickstart_section_has_the_commands_this_test_runs() -> None:
    commands = quickstart_commands((ROOT / "README.md").read_text())
    assert [shlex.split(c)[:3] for c in commands] == [
        ["./deploy/setup.sh", "--dev"],
        [".venv/bin/coxswain", "dev", "up"],
        [".venv/bin/coxswain", "serve", "--kafka-bootstrap"],
        [".venv/bin/coxswain", "dev", "produce"],
        [".venv/bin/coxswain", "worker", "--api"],
        [".venv/bin/coxswain", "scale", "4"],
        [".venv/bin/coxswain", "status"],
    ], commands


class Namespace:
    """A network namespace with its loopback up, where commands run and are stopped."""

    def __init__(self, logs: Path) -> None:
        self.name = f"cxqs-{uuid.uuid4().hex[:8]}"
        self.logs = logs
        # a fresh checkout's folder as the commands' working directory (the coordinator's
        # ./coxswain-data and the worker's ./coxswain-state are made there), with the
        # checkout's install and examples in it
        self.cwd = logs / "checkout"
        self.cwd.mkdir()
        for name in (".venv", "examples"):
            (self.cwd / name).symlink_to(ROOT / name)
        self.running: list[tuple[str, subprocess.Popen[bytes]]] = []

    def __enter__(self) -> Namespace:
        subprocess.run(["ip", "netns", "add", self.name], check=True, timeout=30)
        subprocess.run(["ip", "-n", self.name, "link", "set", "lo", "up"], check=True,
                       timeout=30)
        return self

    def _argv(self, command: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *shlex.split(command)]

    def start(self, label: str, command: str) -> subprocess.Popen[bytes]:
        """``command`` running in the background (its own process group), its output in
        ``logs/label.log``."""
        log = (self.logs / f"{label}.log").open("ab")
        proc = subprocess.Popen(self._argv(command), cwd=self.cwd, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env=os.environ.copy())
        log.close()
        self.running.append((label, proc))
        return proc

    def run(self, command: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self._argv(command), cwd=self.cwd, capture_output=True, text=True,
                              timeout=timeout_s, check=False)

    def log(self, label: str) -> str:
        return (self.logs / f"{label}.log").read_text(errors="replace")

    def wait_for(self, label: str, text: str, timeout_s: float) -> None:
        proc = dict(self.running)[label]
        deadline = time.monotonic() + timeout_s
        while text not in self.log(label):
            assert proc.poll() is None, f"{label} exited:\n{self.log(label)[-4000:]}"
            assert time.monotonic() < deadline, \
                f"{label}: no {text!r} in {timeout_s:.0f}s:\n{self.log(label)[-4000:]}"
            time.sleep(0.5)

    def __exit__(self, *exc: object) -> None:
        # Ctrl-C to each, the last started first (as a user stops them), by pid
        for _, proc in reversed(self.running):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        subprocess.run(["ip", "netns", "del", self.name], check=False, timeout=30)


@pytest.fixture
def namespace(tmp_path: Path) -> Iterator[Namespace]:
    with Namespace(tmp_path) as ns:
        yield ns


@pytest.mark.slow
def test_the_readmes_quickstart_runs_as_written(namespace: Namespace) -> None:
    commands = quickstart_commands((ROOT / "README.md").read_text())
    setup, dev_up, serve, produce, worker, scale, status = commands
    assert setup == "./deploy/setup.sh --dev"  # run by the suite's own command
    ns = namespace
    ns.start("dev-up", dev_up)
    ns.wait_for("dev-up", "(Ctrl-C stops the servers)", 240)
    assert "Kafka:     127.0.0.1:9092" in ns.log("dev-up")
    ns.start("serve", serve)
    ns.wait_for("serve", "Application startup complete", 120)
    ns.start("produce", produce)
    ns.wait_for("produce", "producing orders", 60)
    ns.start("worker", worker)
    ns.wait_for("worker", " records for ", 300)  # its first progress line
    scaled = ns.run(scale)
    assert scaled.returncode == 0, scaled.stderr
    assert re.match(r"elasticity factor 4: job model version \d+", scaled.stdout), scaled.stdout
    deadline = time.monotonic() + 180
    while True:  # the worker takes the 32 tasks of factor 4
        shown = ns.run(status)
        assert shown.returncode == 0, shown.stderr
        if re.search(r"active version (\d+).*elasticity factor 4", shown.stdout) and \
                re.search(r"\s32\s+0\s*$", shown.stdout, re.MULTILINE):
            break
        assert time.monotonic() < deadline, shown.stdout
        time.sleep(1)
    # the model gives it the 32 tasks at once; the worker runs them a step later (a
    # Ctrl-C before that finds none running: "stopping" then hands over none)
    ns.wait_for("worker", "_4 from ", 120)
    # the enriched orders are in the output topic, as the first job makes them
    read = ns.run(f"{sys.executable} -c {shlex.quote(READ_OUTPUT)}", timeout_s=120)
    assert read.returncode == 0, read.stderr
    values = read.stdout.splitlines()
    assert values, read.stderr
    assert all(re.fullmatch(r"\S+ \d+\.\d\d EUR", v) for v in values), values[:5]
    # "Stop one (Ctrl-C)": it hands its tasks over with their last commit and leaves
    stopped = dict(ns.running)["worker"]
    os.killpg(stopped.pid, signal.SIGINT)
    assert stopped.wait(120) == 0, ns.log("worker")[-3000:]
    log = ns.log("worker")
    assert "stopping: handing over 32 tasks" in log and "left the group" in log, log[-3000:]
    assert "HTTP Request" not in log and "[Stage " not in log, log[-3000:]


READ_OUTPUT = """
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "quickstart-check",
              "auto.offset.reset": "earliest", "log_level": 2})
c.subscribe(["orders-enriched"])
got = []
for _ in range(60):
    for m in c.consume(500, 1.0):
        if m.error() is None:
            got.append(m.value().decode())
    if len(got) >= 20:
        break
c.close()
print("\\n".join(got))
"""
