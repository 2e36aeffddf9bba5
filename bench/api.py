"""Benchmark of the REST API on a real coordinator process, on SQLite and PostgreSQL.

* checkpoint commits: 64 concurrent clients each POSTing commits of 1 000 key-bucket
  entries (offsets advance on every commit) -> bucket checkpoints committed per second;
* job model polls: 64 concurrent connections (wrk) GETting /jobmodel with If-None-Match
  of the current version -> 304 answers per second;
* long-poll notification: 64 clients long-poll; each new version is published by
  POST /scale; the time from the publication (``lastRebalance.at`` in /status: the
  coordinator's wall clock right after the version pointer was written; same machine,
  same clock) to each waiter's status line (p50/p99).

Run: python -m bench.api [--seconds 10] [--only sqlite|postgresql]
Targets (issue #3): >= 20 000 bucket checkpoints/s, >= 2 000 polls/s, p99 < 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from tests.infra.postgres import PostgresServer
from tests.service.server import Server

CLIENTS = 64
PROCESSORS = 64  # one per client: a worker commits only its own buckets
PARTITIONS = 1000
FACTOR = 64  # 64 000 single-bucket tasks: 1 000 per processor
BUCKETS_PER_COMMIT = 1000


def start(store: str | None, data_dir: Path) -> Server:
    args = ["--input", f"kafka.events:{PARTITIONS}", "--elasticity-factor", str(FACTOR),
            "--debounce-ms", "500", "--lease-ttl-ms", "600000", "--barrier-timeout-ms",
            "600000", "--log-level", "WARNING"]
    if store:
        args += ["--store", store]
    return Server(data_dir, args).start()


def setup(c: httpx.Client) -> tuple[dict[str, Any], dict[str, str]]:
    """The first job model with every processor, acked; and each one's lease token."""
    tokens: dict[str, str] = {}
    for i in range(PROCESSORS):
        r = c.post("/processors", json={"processorId": f"w{i:02d}", "locationId": f"h{i}"})
        assert r.status_code == 201, r.text
        tokens[f"w{i:02d}"] = r.json()["leaseToken"]
    deadline = time.monotonic() + 120
    while len(c.get("/status").json()["tasksPerProcessor"]) < PROCESSORS:
        if time.monotonic() > deadline:
            raise RuntimeError("job model with every processor not published")
        time.sleep(0.2)
    model = c.get("/jobmodel").json()
    for pid in model["containers"]:
        c.post(f"/jobmodel/{model['version']}/ack", json={"processorId": pid},
               headers={"Coxswain-Lease-Token": tokens[pid]})
    return dict(model), tokens


def commit_templates(model: dict[str, Any]) -> list[tuple[str, str]]:
    """Per processor: a commit body with an __OFF__ placeholder for the offset."""
    out = []
    for pid, container in sorted(model["containers"].items()):
        tasks = sorted(container["tasks"].items())[:BUCKETS_PER_COMMIT]
        checkpoints = {name: {"inputOffsets": [{"ssp": ssp, "offset": "__OFF__"}
                                               for ssp in t["systemStreamPartitions"]]}
                       for name, t in tasks}
        body = json.dumps({"processorId": pid, "jobModelVersion": model["version"],
                           "checkpoints": checkpoints})
        out.append((pid, body))
    return out


async def commits(url: str, model: dict[str, Any], tokens: dict[str, str],
                  seconds: float) -> float:
    templates = commit_templates(model)
    buckets = sum(b.count("__OFF__") for _, b in templates) // len(templates)
    done = 0
    counter = 0
    stop = time.monotonic() + seconds

    async def client(i: int) -> None:
        nonlocal done, counter
        pid, template = templates[i % len(templates)]
        headers = {"content-type": "application/json", "Coxswain-Lease-Token": tokens[pid]}
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            while time.monotonic() < stop:
                counter += 1
                body = template.replace('"__OFF__"', f'"{counter}"')
                r = await c.post("/checkpoints", content=body, headers=headers)
                if r.status_code != 200:
                    raise RuntimeError(f"commit failed: {r.status_code} {r.text[:200]}")
                done += 1

    started = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(CLIENTS)))
    return done * buckets / (time.monotonic() - started)


def polls(url: str, version: int, seconds: float) -> float:
    """304 answers per second from ``wrk`` (64 connections): a Python load generator on
    this 2-core machine would measure itself rather than the server."""
    if shutil.which("wrk") is None:
        raise SystemExit("bench.api needs wrk (apt-get install wrk)")
    out = subprocess.run(
        ["wrk", "-t1", f"-c{CLIENTS}", f"-d{int(seconds)}s", "-H",
         f'If-None-Match: "{version}"', f"{url}/jobmodel"],
        capture_output=True, text=True, check=True).stdout
    if "Non-2xx or 3xx" in out:
        raise RuntimeError(f"expected only 304 answers:\n{out}")
    return float(next(line.split()[1] for line in out.splitlines()
                      if line.startswith("Requests/sec")))


async def raw_long_poll(port: int, version: int) -> float:
    """A long poll over a bare socket (no client library in the way): the time its
    status line arrives."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /jobmodel?since={version}&waitMs=30000&processorId=none HTTP/1.1\r\n"
                 "Host: bench\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    status = await reader.readline()
    at = time.time()
    assert b" 200 " in status, status
    writer.close()
    return at


async def notification(url: str, rounds: int) -> list[float]:
    delays: list[float] = []
    port = int(url.rsplit(":", 1)[1])
    factors = [32, 64]
    async with httpx.AsyncClient(base_url=url, timeout=120) as admin:
        for r in range(rounds):
            version = (await admin.get("/jobmodel", params={"processorId": "none"})).json()[
                "version"]
            waiters = [asyncio.create_task(raw_long_poll(port, version))
                       for _ in range(CLIENTS)]
            await asyncio.sleep(0.3)  # every waiter is parked
            resp = await admin.post("/scale", json={"elasticityFactor": factors[r % 2]})
            assert resp.status_code == 202, resp.text
            answered = await asyncio.gather(*waiters)
            last = (await admin.get("/status")).json()["lastRebalance"]
            assert last["version"] == version + 1, last
            delays.extend(t - last["at"] for t in answered)
    return delays


def run(name: str, store: str | None, seconds: float) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        server = start(store, Path(tmp))
        try:
            with server.client() as c:
                model, tokens = setup(c)
            rate = asyncio.run(commits(server.url, model, tokens, seconds))
            poll_rate = polls(server.url, model["version"], seconds)
            delays = sorted(asyncio.run(notification(server.url, 10)))
        finally:
            server.stop()
    p50 = statistics.median(delays) * 1000
    p99 = delays[int(len(delays) * 0.99) - 1] * 1000
    return (f"| {name:10} | {rate:>12,.0f} | {poll_rate:>10,.0f} | {p50:>8.1f} | "
            f"{p99:>8.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--only", choices=["sqlite", "postgresql"])
    args = parser.parse_args()
    print(f"{CLIENTS} clients, {BUCKETS_PER_COMMIT} buckets per commit, "
          f"{PROCESSORS} processors, {PARTITIONS * FACTOR} tasks")
    print("| store      | buckets/s    | 304 polls/s | p50 ms   | p99 ms   |")
    print("|------------|--------------|------------|----------|----------|")
    if args.only in (None, "sqlite"):
        print(run("SQLite", None, args.seconds), flush=True)
    if args.only in (None, "postgresql"):
        pg = PostgresServer.start()
        try:
            print(run("PostgreSQL", pg.create_database(), args.seconds), flush=True)
        finally:
            pg.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
