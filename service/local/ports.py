"""Free loopback ports, waiting for a local HTTP service, a process's CPU time, and
stopping a process by its pid (with everything it started, for a process that leads its
own process group)."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx


def cpu_seconds(pid: int) -> float:
    """The user + system CPU time process ``pid`` has used (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A TCP port nobody listens on right now (on 127.0.0.1)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports nobody listens on right now (on 127.0.0.1).

    All are held bound until the last is picked: a port closed at once can come back from
    the kernel's very next pick, and two servers given the same port fail at start.
    """
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


def wait_started(proc: subprocess.Popen[bytes], ready: Callable[[], bool], what: str,
                 log: Path, timeout_s: float, stop: Callable[[], None],
                 poll_s: float = 0.1) -> None:
    """Return once ``ready()``; raise ``RuntimeError`` when ``proc`` exits first (with its
    log's tail) or ``timeout_s`` passes. Whatever ends the wait otherwise, a failure or an
    interruption (Ctrl-C, SIGTERM: ``KeyboardInterrupt``), ``stop()`` runs first: a start
    that does not return leaves nothing running."""
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{what} exited: {tail}")
            if ready():
                return
            time.sleep(poll_s)
        raise RuntimeError(f"{what} did not start within {timeout_s}s")
    except BaseException:
        stop()
        raise


def wait_until_answering(url: str, proc: subprocess.Popen[bytes], timeout_s: float,
                         verify: ssl.SSLContext | bool = True) -> bool:
    """True once ``url`` answers 200 (HTTPS checked with ``verify``); False when ``proc``
    (the server) exits first or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url, timeout=0.5, verify=verify).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    return False


def stop_process(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM,
                 grace_s: float = 15.0) -> None:
    """Signal ``proc`` (by its pid) and wait; SIGKILL if it outlives ``grace_s``."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(15)


def stop_process_group(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM,
                       grace_s: float = 15.0) -> None:
    """Stop ``proc`` as :func:`stop_process` does, then kill whatever it started that is
    left in its process group and wait until it is gone.

    ``proc`` must have been started with ``start_new_session=True``. A worker started so
    takes its Spark JVM along: PySpark's JVM exits by itself once its Python parent is
    gone, but only later (it notices its closed stdin, then runs its shutdown hooks), so a
    worker killed during its grace period would otherwise leave a JVM behind.
    """
    if proc is None:
        return
    stop_process(proc, sig, grace_s)
    kill_process_group(proc.pid)


def kill_process_group(pgid: int, timeout_s: float = 10.0) -> None:
    """SIGKILL every process of group ``pgid`` (a crash of a whole worker, JVM included)
    and wait until none is left."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return  # nobody left in the group
    deadline = time.monotonic() + timeout_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of group ``pgid``, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        if fields[2] == str(pgid) and fields[0] != "Z":
            found.append(int(entry))
    return found
