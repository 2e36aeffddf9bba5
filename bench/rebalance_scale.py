"""A whole rebalance cycle at scale (issue #17): one coordinator (on its embedded SQLite
store, or with ``--backend zookeeper`` elected on a real ZooKeeper that holds its job
models, leases and barriers, with checkpoints on a real PostgreSQL), ``--processors``
simulated processors (asyncio HTTP clients in this process: register, heartbeat on the
interval, long-poll their own container with ``processorId`` and their lease token, ack
each version they are part of) and ``--partitions`` x factor virtual tasks.

Then, one at a time: one processor leaves (``DELETE``), one joins (a registration), the
elasticity factor doubles (``POST /scale``). For each: seconds from the trigger to the
version's publication (``/status`` ``lastRebalance.at``), to every processor of it
having received it, and to its barrier being ``done``; the bytes of job model the fleet
received for it; the coordinator's CPU seconds over the cycle. Before the cycles, the
coordinator's CPU share while the fleet only heartbeats (and long-polls), and its
resident memory with the model and its indexes.

Run: python -m bench.rebalance_scale [--processors 1000] [--partitions 25000] [--factor 4]
[--backend sqlite|zookeeper] [--no-factor] [--record]

It ends with the leader's generation time (``/status`` ``lastRebalance.generationSeconds``,
the model's computation) of the leaves and joins at the starting size, as a ratio to the
figure recorded in ``bench/recorded/rebalance_scale.json`` for the same shape (``--record``
writes this run's): a regression shows at once. ``--no-factor`` leaves the factor changes
out, so every leave and join is at the starting size (the bisect's measure; with them, the
median of three leaves is the larger of the two at 100k tasks). Compare the generation
with Kafka's UniformAssignor (``../shared/bench-anchors/``) run in the same session.
Targets: beyond the debounce, < 1 s to barrier done for a leave or a join on SQLite, < 2 s
on ZooKeeper; heartbeats of 1000 processors every 2 s cost under 25% of one core.

The fleet uses a minimal keep-alive HTTP client (``bench/mini_http.py``): with httpx the
simulating process saturated its core and its late heartbeats cost leases. Every failed
request is counted and printed; a run with errors measures the fleet, not the coordinator.
A simulated processor reads only the head of its answer (the version) and whether its
container is in it: parsing a thousand 20 KB answers (what each real worker does on its
own CPU) took the simulating process a third of a second per rebalance, which the times
to "every processor has it" and to the barrier's end then counted. A processor acks on
its long poll's connection: a real worker's HTTP client pool hands its ack a connection
that its poll or its heartbeats keep open. Acks on a connection of their own found it closed
by the server's keep-alive timeout after any quiet spell, and the first rebalance after
one reopened a thousand connections (0.5-1.1 s more to barrier done).
Figures: bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.mini_http import HttpError, MiniConnection
from service.local.ports import cpu_seconds
from service.local.zookeeper import ZooKeeperEnsemble
from tests.infra.postgres import PostgresServer
from tests.service.server import Server

HEARTBEAT_S = 2.0
#: the generation figures a run is compared with (``--record`` writes them)
RECORDED = Path(__file__).with_name("recorded") / "rebalance_scale.json"
VERSION_HEAD = re.compile(rb'\{"version":(\d+),')  # how every job model answer starts


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Fleet:
    """The simulated processors, with two keep-alive connections each, as a real worker's
    HTTP client uses its pool: one for the long poll and the ack that follows an answer
    (a worker's pool has that connection idle and open when its main thread acks), one for
    registration and heartbeats (a worker heartbeats from its own thread, so a slow ack
    never holds its heartbeats up). What each received and when."""

    host: str
    port: int
    tokens: dict[str, str] = field(default_factory=dict)
    received: dict[int, dict[str, float]] = field(default_factory=dict)  # version -> pid -> t
    bytes: dict[int, int] = field(default_factory=dict)
    acked_done: dict[int, float] = field(default_factory=dict)
    stopping: set[str] = field(default_factory=set)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    conns: dict[str, tuple[MiniConnection, MiniConnection]] = field(default_factory=dict)

    async def join(self, pid: str) -> None:
        poll, beats = (MiniConnection(self.host, self.port) for _ in range(2))
        self.conns[pid] = (poll, beats)
        status, body = await beats.request("POST", "/processors", {
            "processorId": pid, "locationId": f"host-{pid}"})
        if status != 201:
            raise RuntimeError(f"registration of {pid}: {status} {body[:200]!r}")
        self.tokens[pid] = json.loads(body)["leaseToken"]
        self.tasks[pid] = asyncio.create_task(self._run(pid))

    async def leave(self, pid: str) -> None:
        self.stopping.add(pid)
        self.tasks.pop(pid).cancel()
        poll, beats = self.conns.pop(pid)
        await beats.request("DELETE", f"/processors/{pid}",
                            headers={"Coxswain-Lease-Token": self.tokens[pid]})
        for conn in (poll, beats):
            await conn.aclose()

    async def close(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        for conns in self.conns.values():
            for conn in conns:
                await conn.aclose()

    async def _run(self, pid: str) -> None:
        lease = {"Coxswain-Lease-Token": self.tokens[pid]}
        poll, beats = self.conns[pid]
        beat = asyncio.create_task(self._heartbeat(pid, beats, lease))
        version = 0
        try:
            while pid not in self.stopping:
                try:
                    status, body = await poll.request(
                        "GET", f"/jobmodel?processorId={pid}&since={version}&waitMs=30000",
                        headers=lease)
                except (HttpError, OSError) as e:  # counted; the poll goes on as a worker's
                    self.errors[f"poll {type(e).__name__}"] += 1
                    await asyncio.sleep(0.2)
                    continue
                if status != 200:
                    if status != 304:
                        self.errors[f"poll {status}"] += 1
                    continue
                now = time.time()
                head = VERSION_HEAD.match(body)
                if head is None:
                    self.errors["poll unreadable answer"] += 1
                    continue
                version = int(head.group(1))
                self.received.setdefault(version, {})[pid] = now
                self.bytes[version] = self.bytes.get(version, 0) + len(body)
                if b'"containers":{"' + pid.encode() + b'":' in body:
                    try:
                        status, body = await poll.request(
                            "POST", f"/jobmodel/{version}/ack", {"processorId": pid}, lease)
                    except (HttpError, OSError) as e:
                        self.errors[f"ack {type(e).__name__}"] += 1
                        continue
                    if status == 200 and json.loads(body)["barrier"] == "done":
                        self.acked_done.setdefault(version, time.time())
                    elif status != 200:
                        self.errors[f"ack {status}"] += 1
        finally:
            beat.cancel()

    async def _heartbeat(self, pid: str, ctl: MiniConnection, lease: dict[str, str]) -> None:
        await asyncio.sleep(HEARTBEAT_S * (hash(pid) % 100) / 100)  # spread over the period
        while True:
            try:
                status, _ = await ctl.request("POST", f"/processors/{pid}/heartbeat", {},
                                              lease)
                if status != 200:
                    self.errors[f"heartbeat {status}"] += 1
            except (HttpError, OSError) as e:
                self.errors[f"heartbeat {type(e).__name__}"] += 1
            await asyncio.sleep(HEARTBEAT_S)


async def settled(client: httpx.AsyncClient, members: int, since: int,
                  fleet: Fleet | None = None, timeout_s: float = 600) -> dict[str, Any]:
    """The status once a version after ``since`` with ``members`` processors is done."""
    deadline = time.monotonic() + timeout_s
    report = time.monotonic() + 15
    while time.monotonic() < deadline:
        st = (await client.get("/status")).json()
        if (st["latestVersion"] or 0) > since and st["barrier"] == "done" \
                and len(st["tasksPerProcessor"]) == members:
            return dict(st)
        if time.monotonic() > report:  # progress of a long wait
            report = time.monotonic() + 15
            print(f"    ... version {st['latestVersion']} barrier {st['barrier']} "
                  f"{len(st['tasksPerProcessor'])}/{members} processors "
                  f"({(st.get('lastRebalance') or {}).get('reason')}); client errors "
                  f"{dict(fleet.errors) if fleet else '?'}", flush=True)
        await asyncio.sleep(0.05)
    raise TimeoutError(f"no settled version after {since} within {timeout_s}s")


async def cycle(name: str, fleet: Fleet, admin: httpx.AsyncClient, server: Server,
                action: Any, members: int) -> dict[str, float]:
    before = (await admin.get("/status")).json()["latestVersion"]
    cpu0 = cpu_seconds(server.proc.pid)  # type: ignore[union-attr]
    t0 = time.time()
    await action()
    st = await settled(admin, members, before, fleet)
    observed_done = time.time()  # /status polled every 50 ms
    version = st["latestVersion"]
    published = st["lastRebalance"]["at"]
    got = fleet.received.get(version, {})
    deadline = time.monotonic() + 60
    while len(got) < members and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    done_at = min(fleet.acked_done.get(version, observed_done), observed_done)
    out = {"publishedS": published - t0, "allReceivedS": max(got.values()) - t0,
           "barrierDoneS": done_at - t0, "megabytes": fleet.bytes.get(version, 0) / 1e6,
           "cpuS": cpu_seconds(server.proc.pid) - cpu0,  # type: ignore[union-attr]
           "generationS": st["lastRebalance"]["generationSeconds"],
           # (rendering the answers' JSON and the wait for the state lock; a coordinator
           # from before 2026-11-29 counted them in generationSeconds)
           "prepareS": st["lastRebalance"].get("prepareSeconds", 0.0)}
    print(f"  {name:14s} " + "  ".join(f"{k} {v:.3f}" for k, v in out.items())
          + f"  (client errors so far: {dict(fleet.errors) or 'none'})", flush=True)
    return out


async def run(args: argparse.Namespace, server: Server) -> dict[str, list[dict[str, float]]]:
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as admin:
        url = httpx.URL(server.url)
        fleet = Fleet(url.host, url.port or 80)
        ids = [f"p{i:04d}" for i in range(args.processors)]
        started = time.monotonic()
        for start in range(0, len(ids), 100):
            await asyncio.gather(*(fleet.join(pid) for pid in ids[start:start + 100]))
        await settled(admin, len(ids), 0, fleet)
        print(f"{len(ids)} processors registered and settled in "
              f"{time.monotonic() - started:.1f}s (client errors: "
              f"{dict(fleet.errors) or 'none'})", flush=True)
        pid = server.proc.pid  # type: ignore[union-attr]
        await asyncio.sleep(2 * HEARTBEAT_S)
        cpu0, t0 = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(args.quiet_s)
        share = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
        print(f"heartbeats + parked long polls of {len(ids)} processors: {share * 100:.1f}% "
              f"of one core; coordinator RSS {rss_mb(pid):.0f} MB", flush=True)
        results: dict[str, list[dict[str, float]]] = {"leave": [], "join": [], "factor": []}
        factor = args.factor
        for i in range(args.runs):
            victim = ids.pop()
            results["leave"].append(await cycle(
                "leave", fleet, admin, server, lambda v=victim: fleet.leave(v), len(ids)))
            newcomer = f"n{i:03d}"
            ids.append(newcomer)
            results["join"].append(await cycle(
                "join", fleet, admin, server, lambda n=newcomer: fleet.join(n), len(ids)))
            if args.no_factor:
                continue
            factor = factor * 2 if i % 2 == 0 else factor // 2

            async def scale(f: int = factor) -> None:
                r = await admin.post("/scale", json={"elasticityFactor": f})
                r.raise_for_status()

            results["factor"].append(await cycle(
                f"factor -> {factor}", fleet, admin, server, scale, len(ids)))
        await fleet.close()
        return results


@contextmanager
def backend_args(backend: str, root: Path) -> Iterator[list[str]]:
    """The coordinator's store arguments; starts (and stops, by pid) what they name."""
    if backend == "sqlite":
        yield []
        return
    with ExitStack() as stack:
        zk = ZooKeeperEnsemble.start(1)
        stack.callback(zk.stop)
        pg = PostgresServer.start()
        stack.callback(pg.stop)
        print(f"ZooKeeper at {zk.connect_string}, PostgreSQL on port {pg.port}", flush=True)
        yield ["--zk", zk.connect_string, "--job", "bench-scale",
               "--store", pg.create_database(), "--replica-id", "r0"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processors", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=25_000)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--quiet-s", type=float, default=20.0)
    p.add_argument("--backend", choices=["sqlite", "zookeeper"], default="sqlite")
    p.add_argument("--no-factor", action="store_true",
                   help="only leaves and joins, all at the starting size (the bisect's and "
                        "the regression check's measure: every leave at 100k tasks)")
    p.add_argument("--record", action="store_true",
                   help=f"write this run's generation medians to {RECORDED} as the figure "
                        "later runs are compared with")
    p.add_argument("--log-level", default="WARNING",
                   help="the coordinator's (INFO logs each publication and barrier end)")
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="bench-rebalance-scale-"))
    with backend_args(args.backend, root) as store:
        server = Server(root, [
            "--input", f"kafka.orders:{args.partitions}", "--elasticity-factor",
            str(args.factor), "--max-elasticity-factor", "64", "--debounce-ms", "200",
            "--barrier-timeout-ms", "120000", "--heartbeat-interval-ms",
            str(int(HEARTBEAT_S * 1000)), "--log-level", args.log_level, *store]).start(
                timeout_s=60)
        try:
            results = asyncio.run(run(args, server))
        finally:
            server.stop()
    print(f"\n{args.processors} processors, {args.partitions} partitions x factor "
          f"{args.factor} (debounce 200 ms, {args.backend}); medians of {args.runs}:")
    print(json.dumps({name: {k: round(statistics.median(r[k] for r in runs), 3)
                             for k in runs[0]} for name, runs in results.items() if runs},
                     indent=1))
    print(f"load average after: {os.getloadavg()}")
    compare_with_recorded(results, args)


def generation_medians(results: dict[str, list[dict[str, float]]], no_factor: bool
                       ) -> dict[str, float]:
    """The leader's generation seconds of the leaves and joins at the starting size (with
    factor changes, the even runs' ones: the odd runs' follow the factor's doubling)."""
    def at_start(rows: list[dict[str, float]]) -> list[float]:
        return [r["generationS"] for i, r in enumerate(rows) if no_factor or i % 2 == 0]
    return {f"{name}GenerationS": round(statistics.median(at_start(results[name])), 4)
            for name in ("leave", "join") if at_start(results[name])}


def compare_with_recorded(results: dict[str, list[dict[str, float]]],
                          args: argparse.Namespace) -> None:
    """Print this run's leave and join generation times against the recorded figure (a
    regression shows at once), and record them with ``--record``."""
    now = generation_medians(results, args.no_factor)
    shape = {"processors": args.processors, "partitions": args.partitions,
             "factor": args.factor, "backend": args.backend}
    recorded = json.loads(RECORDED.read_text()) if RECORDED.exists() else None
    if recorded is not None and recorded.get("shape") == shape:
        for key, value in now.items():
            before = recorded["figures"].get(key)
            if before:
                print(f"{key}: {value * 1000:.1f} ms, {value / before:.2f}x the recorded "
                      f"{before * 1000:.1f} ms ({recorded.get('note', '')})")
    elif recorded is not None:
        print(f"(recorded figures are for {recorded.get('shape')}: not compared)")
    if args.record:
        note = f"{time.strftime('%Y-%m-%d')}, load {os.getloadavg()[0]:.1f}, {args.runs} runs"
        RECORDED.write_text(json.dumps({"shape": shape, "figures": now, "note": note},
                                       indent=1) + "\n")
        print(f"recorded in {RECORDED}")


if __name__ == "__main__":
    main()
