"""Other hosts on this machine, for network faults: a network namespace (``ip netns``, as
root) linked to the root namespace by veth pairs, one per group of services, that a test
cuts and restores one by one. A cut link is a real partition: its veth is down, packets
are dropped, new connections time out and open ones stall (nothing answers, nothing
refuses), exactly as when a switch port dies.

Services keep their loopback addresses on both sides. A process in the namespace reaches
a root-namespace service at ``127.0.0.1:PORT`` as before: a relay there (one process per
namespace, ``tests.infra.relay``) forwards it over the link's veth to a relay in the root
namespace listening on the link's root-side address, which forwards to the service. And a
service inside the namespace (a coordinator replica) is *exposed* at ``127.0.0.1:PORT``
in the root namespace the other way round. Addresses: link ``k`` of host ``h`` is
``10.231.h.(4k+1)`` (root side) and ``10.231.h.(4k+2)`` (namespace side), a /30 each.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.local.ports import stop_process
from tests.infra.relay import Relay


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Link:
    """One veth pair of a host, and the services that cross it."""

    name: str
    index: int
    reach: tuple[int, ...]  # root-namespace loopback ports reached from inside
    expose: tuple[int, ...]  # namespace loopback ports reached from the root namespace
    root_dev: str = ""
    root_ip: str = ""
    ns_ip: str = ""
    relays: list[Relay] = field(default_factory=list)
    up: bool = True


class Host:
    """A network namespace with links to the root namespace."""

    def __init__(self, name: str, number: int, work_dir: Path) -> None:
        if not 1 <= number <= 250:
            raise ValueError(f"host numbers are 1..250, got {number}")
        self.name = name
        self.number = number
        self.work_dir = work_dir
        self.links: dict[str, Link] = {}
        self._relay_proc: subprocess.Popen[bytes] | None = None

    def link(self, name: str, reach: tuple[int, ...] = (), expose: tuple[int, ...] = ()
             ) -> Host:
        """Add a link (before :meth:`start`) carrying ``reach`` and ``expose`` ports."""
        index = len(self.links)
        self.links[name] = Link(name, index, tuple(reach), tuple(expose))
        return self

    def start(self) -> Host:
        """Create the namespace, its links and relays."""
        _ip("netns", "add", self.name)
        _ip("-n", self.name, "link", "set", "lo", "up")
        specs: list[str] = []
        for link in self.links.values():
            base = 4 * link.index
            link.root_dev = f"cx{self.number}r{link.index}"
            ns_dev = f"cx{self.number}n{link.index}"
            link.root_ip = f"10.231.{self.number}.{base + 1}"
            link.ns_ip = f"10.231.{self.number}.{base + 2}"
            _ip("link", "add", link.root_dev, "type", "veth", "peer", "name", ns_dev)
            _ip("link", "set", ns_dev, "netns", self.name)
            _ip("addr", "add", f"{link.root_ip}/30", "dev", link.root_dev)
            _ip("-n", self.name, "addr", "add", f"{link.ns_ip}/30", "dev", ns_dev)
            _ip("link", "set", link.root_dev, "up")
            _ip("-n", self.name, "link", "set", ns_dev, "up")
            for port in link.reach:  # root side: link address -> the service
                relay = Relay(("127.0.0.1", port), port, link.root_ip)
                relay.restore()
                link.relays.append(relay)
                specs.append(f"127.0.0.1:{port}={link.root_ip}:{port}")
            for port in link.expose:  # root loopback -> the link -> the namespace
                relay = Relay((link.ns_ip, port), port, "127.0.0.1")
                relay.restore()
                link.relays.append(relay)
                specs.append(f"{link.ns_ip}:{port}=127.0.0.1:{port}")
        if specs:
            log = (self.work_dir / f"relay-{self.name}.log").open("ab")
            self._relay_proc = self.popen(
                [sys.executable, "-m", "tests.infra.relay", *specs], stdout=log,
                stderr=subprocess.STDOUT)
            self._wait_relaying()
        return self

    def _wait_relaying(self, timeout_s: float = 30) -> None:
        log = self.work_dir / f"relay-{self.name}.log"
        deadline = time.monotonic() + timeout_s
        while "relaying" not in (log.read_text() if log.exists() else ""):
            assert self._relay_proc is not None
            if self._relay_proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the relays of {self.name} did not start: "
                                   f"{log.read_text() if log.exists() else ''}")
            time.sleep(0.05)

    def popen(self, args: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start a process in the namespace (its children stay there too); Spark binds
        to the loopback address, as the host's name means nothing here."""
        env = {**(kwargs.pop("env", None) or os.environ), "SPARK_LOCAL_IP": "127.0.0.1"}
        return subprocess.Popen(["ip", "netns", "exec", self.name, *args], env=env,
                                **kwargs)

    def cut(self, name: str) -> None:
        """Partition the link ``name``: its veth goes down (packets dropped)."""
        link = self.links[name]
        _ip("link", "set", link.root_dev, "down")
        link.up = False

    def restore(self, name: str) -> None:
        """Bring the link ``name`` back."""
        link = self.links[name]
        _ip("link", "set", link.root_dev, "up")
        link.up = True

    def stop(self) -> None:
        """Stop the relays and delete the namespace (and with it the veth pairs)."""
        if self._relay_proc is not None:
            stop_process(self._relay_proc)
        for link in self.links.values():
            for relay in link.relays:
                relay.cut()
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", self.name)
        for link in self.links.values():  # a root end left behind by a failed start
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("link", "del", link.root_dev)
