"""Coordinator CPU spent on heartbeats alone (issue #17): ``--processors`` keep-alive clients
register with one coordinator (on SQLite, the embedded default, or ``--backend zookeeper``
with PostgreSQL, both started and stopped here; default lease TTL) and heartbeat every
``--interval-s``, spread over the interval; the coordinator's CPU seconds over
``--seconds`` divided by the wall time, and per heartbeat.

Run: python -m bench.heartbeats [--processors 1000] [--interval-s 2] [--seconds 15]
     [--backend sqlite|zookeeper] [--tls | --compare-tls]
Target: 1000 processors every 2 s under 25% of one core. ``--tls``: over HTTPS (a test
CA and certificate made with openssl); ``--compare-tls``: HTTP then HTTPS in the same
run, and the ratio (#51).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import tempfile
import time
from pathlib import Path

from bench.mini_http import MiniConnection
from bench.rebalance_scale import backend_args
from common.tls import ClientTls
from service.local.ports import cpu_seconds
from tests.infra.certs import make_certs
from tests.service.server import Server


async def measure(server: Server, processors: int, interval_s: float,
                  seconds: float, tls: ssl.SSLContext | None = None) -> tuple[float, float]:
    """(heartbeats per second, coordinator CPU seconds per wall second)."""
    assert server.proc is not None
    conns = [MiniConnection("127.0.0.1", server.port, tls) for _ in range(processors)]
    tokens = []
    for i, conn in enumerate(conns):
        status, body = await conn.request("POST", "/processors", {
            "processorId": f"p{i:04d}", "locationId": f"h{i}"})
        if status != 201:
            raise RuntimeError(f"registration: {status} {body[:200]!r}")
        tokens.append(json.loads(body)["leaseToken"])
    count = 0
    failed = 0
    refusals: dict[tuple[int, bytes], int] = {}

    async def beat(i: int) -> None:
        nonlocal count, failed
        await asyncio.sleep(interval_s * i / processors)
        while True:
            status, body = await conns[i].request(
                "POST", f"/processors/p{i:04d}/heartbeat", {},
                {"Coxswain-Lease-Token": tokens[i]})
            if status == 200:
                count += 1
            else:
                failed += 1
                why = (status, body[:160])
                refusals[why] = refusals.get(why, 0) + 1
            await asyncio.sleep(interval_s)

    beats = [asyncio.create_task(beat(i)) for i in range(processors)]
    await asyncio.sleep(interval_s + 3)  # past the first generations and every first beat
    cpu0, n0, t0 = cpu_seconds(server.proc.pid), count, time.monotonic()
    await asyncio.sleep(seconds)
    wall = time.monotonic() - t0
    share = (cpu_seconds(server.proc.pid) - cpu0) / wall
    rate = (count - n0) / wall
    for task in beats:
        task.cancel()
    for conn in conns:
        await conn.aclose()
    if failed:
        common = sorted(refusals.items(), key=lambda kv: -kv[1])[:3]
        raise RuntimeError(f"{failed} heartbeats were refused, for example: {common}")
    return rate, share


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processors", type=int, default=1000)
    p.add_argument("--interval-s", type=float, default=2.0)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--partitions", type=int, default=25_000)
    p.add_argument("--backend", choices=["sqlite", "zookeeper"], default="sqlite")
    tls = p.add_mutually_exclusive_group()
    tls.add_argument("--tls", action="store_true", help="over HTTPS")
    tls.add_argument("--compare-tls", action="store_true",
                     help="HTTP, then HTTPS, same run: the ratio")
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    modes = [False, True] if args.compare_tls else [args.tls]
    shares: dict[bool, float] = {}
    for https in modes:
        root = Path(tempfile.mkdtemp(prefix="bench-heartbeats-"))
        rate, shares[https] = run(args, root, https)
        print(f"{args.processors} processors every {args.interval_s:g}s ({args.backend}, "
              f"{'HTTPS' if https else 'HTTP'}): {rate:.0f} heartbeats/s, coordinator CPU "
              f"{shares[https] * 100:.1f}% of one core, "
              f"{shares[https] / rate * 1000:.2f} ms per heartbeat", flush=True)
    if args.compare_tls:
        print(f"HTTPS / HTTP coordinator CPU: {shares[True] / shares[False]:.2f}x")
    print(f"load average after: {os.getloadavg()}")


def run(args: argparse.Namespace, root: Path, https: bool) -> tuple[float, float]:
    """One coordinator (HTTPS with a test CA's certificate when ``https``) and the
    processors' heartbeats against it."""
    tls_args: list[str] = []
    context = None
    if https:
        certs = make_certs(root / "certs")
        tls_args = ["--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
        context = ClientTls(str(certs.ca)).context()
    with backend_args(args.backend, root) as store:
        server = Server(root, [
            "--input", f"kafka.orders:{args.partitions}", "--elasticity-factor", "4",
            "--heartbeat-interval-ms", str(int(args.interval_s * 1000)),
            # these clients never ack a job model: no barrier may time them out
            "--barrier-timeout-ms", "600000", "--log-level", "WARNING", *store, *tls_args],
            verify=context).start(timeout_s=60)
        try:
            return asyncio.run(measure(server, args.processors, args.interval_s,
                                       args.seconds, context))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
