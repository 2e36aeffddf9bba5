"""Stateful jobs end to end on a real Kafka broker, Spark workers and moto's S3 API server:
what standbys, event-driven probing and state backups cost or save.

* failover: two workers share 4 tasks holding ~``--mb`` MB of per-key state; one is killed
  -9 while records flow; seconds from the kill to the first record of its tasks processed
  by the survivor (lease expiry + rebalance + restore + query start), and the bytes its
  restores downloaded; with one standby per task and with none.
* scale-out: one worker runs all 4 tasks; a second joins under a steady 100 records/s
  and gets warm-ups first (KIP-441); seconds from its join (first job model naming it) to
  the balanced model (2 actives each, barrier done), the longest pause between two
  outputs of a task that moved (against the same before the join: the batches' own
  cadence), and the bytes the new worker's restores downloaded; with event-driven probing
  and with the probing timer alone (both with a ``--probing-interval-s`` timer, shortened
  from the default 10 minutes to keep the run short). Issue #52's curve: ``--only
  scale-out --event-only`` at ``--mb 100``, ``1000``, ``4000``.
* factor change: two workers under a steady load, factor 2 -> 4 -> 2, with and without
  state (the state splits and merges): the steady latency (produce to processing) and the
  worst latency of records produced within 30 s after each change.
* throughput: one worker processes ``--records`` pre-produced records with per-key state
  (every record rewrites its key's 4 KB profile; backups to S3 after each batch) and the
  same app without state; records/s from the first record's processing to the last one's.
* rescale: one task holding ``--mb`` MB on one worker under 100 records/s, split to
  factor 2 and merged back: the pause of each (the last output before the change to the
  first output after it, for the same keys). Issue #52's curve: ``--only rescale`` at
  ``--mb 100``, ``1000``, ``4000``; ``--merge-after-s`` (default 10) between the split
  taking over and the merge.

Run: .venv/bin/python -m bench.stateful [--mb 40] [--records 20000] [--probing-interval-s 60]
     [--only failover|scale-out|throughput|factor-change|rescale] [--event-only]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
from confluent_kafka import Producer

from service.local.kafka import LocalKafka
from service.local.orders import create_topics, read_json_records
from service.local.ports import kill_process_group, stop_process_group
from service.local.s3 import CREDENTIALS, LocalS3
from tests.service.server import Server

PROFILE_BYTES = 4096
#: a standby's fetch in a worker's log (``worker.state.tasks``)
_FETCHED = re.compile(r"standby (.+?): fetched \S+ \((\d+) bytes\)")


def profile_task(ctx: Any, rows: pd.DataFrame) -> pd.DataFrame:
    """process_task with state: per key a counter and a 4 KB profile rewritten by every
    record; outputs (key, seq, count, task, processor, t)."""
    out = []
    for k, v in zip(rows["key"], rows["value"], strict=True):
        seq, sent = v.decode().split(":")
        count = ctx.state.get(k, "count", 0) + 1
        ctx.state.set(k, "count", count)
        ctx.state.set_bytes(k, "profile", os.urandom(PROFILE_BYTES))
        out.append(json.dumps({"key": k.decode(), "seq": int(seq), "count": count,
                               "task": ctx.task_name, "processor": ctx.processor_id,
                               "sent": float(sent), "t": time.time()}))
    return pd.DataFrame({"key": list(rows["key"]), "value": out})


def stateless_task(ctx: Any, rows: pd.DataFrame) -> pd.DataFrame:
    """The same output and per-record work, without state."""
    out = []
    for k, v in zip(rows["key"], rows["value"], strict=True):
        seq, sent = v.decode().split(":")
        os.urandom(PROFILE_BYTES)
        out.append(json.dumps({"key": k.decode(), "seq": int(seq), "count": 0,
                               "task": ctx.task_name, "processor": ctx.processor_id,
                               "sent": float(sent), "t": time.time()}))
    return pd.DataFrame({"key": list(rows["key"]), "value": out})


class Keyed:
    """A producer of keyed records carrying each key's sequence number."""

    def __init__(self, kafka: LocalKafka, topic: str, keys: int) -> None:
        self._p = Producer({"bootstrap.servers": kafka.bootstrap, "log_level": 2,
                            "linger.ms": 20})
        self._topic, self._keys = topic, keys
        self._seq: dict[int, int] = defaultdict(int)
        self.total = 0

    def send(self, n: int) -> None:
        for _ in range(n):
            key = self.total * 7919 % self._keys
            self._p.produce(self._topic, key=f"key-{key}".encode(),
                            value=f"{self._seq[key]}:{time.time():.3f}".encode())
            self._seq[key] += 1
            self.total += 1
            if self.total % 10_000 == 0:
                self._p.flush(60)
        self._p.flush(60)


@contextmanager
def feeding(producer: Keyed, records: int, every_s: float) -> Iterator[None]:
    """``records`` sent every ``every_s`` by a thread of its own while the block runs."""
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            producer.send(records)
            time.sleep(every_s)

    feeder = threading.Thread(target=produce, daemon=True)
    feeder.start()
    try:
        yield
    finally:
        stop.set()
        feeder.join(30)


def read_output(kafka: LocalKafka, topic: str) -> list[dict[str, Any]]:
    return read_json_records(kafka.bootstrap, topic)


def wait_output(kafka: LocalKafka, topic: str, n: int, timeout_s: float = 900
                ) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        records = read_output(kafka, topic)
        if len({(r["key"], r["seq"]) for r in records}) >= n:
            return records
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(records)} of {n} records processed")
        time.sleep(2)


class Job:
    """A coordinator, its topics, a bucket, and workers started as processes."""

    def __init__(self, kafka: LocalKafka, s3: LocalS3, root: Path, keys: int,
                 *server_args: str, stateful: bool = True, partitions: int = 2,
                 factor: int = 2, worker_args: tuple[str, ...] = ()) -> None:
        self.kafka, self.s3, self.root = kafka, s3, root
        self.worker_args = worker_args
        self.topic, self.output = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
        create_topics(kafka.bootstrap, [(self.topic, partitions), (self.output, 1)])
        self.producer = Keyed(kafka, self.topic, keys)
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(bucket)
        self.blobs = f"s3://{bucket}/job"
        self.server = Server(root / "coordinator", [
            "--kafka-bootstrap", kafka.bootstrap, "--input", f"kafka.{self.topic}",
            "--elasticity-factor", str(factor), "--debounce-ms", "300",
            *(["--stateful"] if stateful else []),
            "--partition-poll-interval-ms", "1000", "--log-level", "WARNING",
            *server_args]).start()
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    def start_worker(self, pid: str, app: str = "bench.stateful:profile_task",
                     stateful: bool = True) -> None:
        state = ["--stateful", "--state-dir", str(self.root / f"state-{pid}"),
                 "--blob-store", self.blobs, "--blob-store-endpoint",
                 self.s3.endpoint] if stateful else []
        self.workers[pid] = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker", "--coordinator", self.server.url,
             "--api", "task", "--app", app, "--output-topic", self.output,
             "--kafka-bootstrap", self.kafka.bootstrap, "--processor-id", pid,
             "--location", f"host-{pid}", "--spark-master", "local[2]",
             "--max-offsets-per-trigger", "4000", *state, *self.worker_args],
            stdout=(self.root / f"{pid}.log").open("ab"), stderr=subprocess.STDOUT,
            start_new_session=True, env={**os.environ, **CREDENTIALS})

    def model(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.server.url}/jobmodel", timeout=30).json())

    def stats(self, pid: str) -> dict[str, Any]:
        for p in httpx.get(f"{self.server.url}/status", timeout=30).json()["processors"]:
            if p["processorId"] == pid:
                return dict(p.get("stats") or {})
        return {}

    def close(self) -> None:
        for w in self.workers.values():
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in self.workers.values():
            stop_process_group(w, grace_s=60)
        self.server.stop()


def actives(model: dict[str, Any], pid: str) -> list[str]:
    tasks = model["containers"].get(pid, {}).get("tasks", {})
    return sorted(n for n, t in tasks.items() if t["taskMode"] == "Active")


def failover(kafka: LocalKafka, s3: LocalS3, root: Path, mb: int, standbys: int
             ) -> tuple[float, int, str]:
    """Seconds from kill -9 to the victim's tasks' first output on the survivor; bytes
    those restores downloaded; their restore sources."""
    keys = mb * 1024 * 1024 // PROFILE_BYTES
    job = Job(kafka, s3, root, keys, "--lease-ttl-ms", "6000",
              "--num-standbys", str(standbys))
    try:
        job.producer.send(keys)  # every key once: the state reaches its size
        for pid in ("w0", "w1"):
            job.start_worker(pid)
        wait_output(kafka, job.output, job.producer.total)
        time.sleep(8)  # standby refreshes after the last commit
        victim = actives(job.model(), "w1")
        with feeding(job.producer, 100, 0.25):
            time.sleep(3)
            killed_at = time.time()
            kill_process_group(job.workers["w1"].pid)  # kill -9, its JVM too
            job.workers["w1"].wait(30)
            deadline = time.monotonic() + 300
            resumed = None
            while resumed is None and time.monotonic() < deadline:
                time.sleep(1)
                after = [r["t"] for r in read_output(kafka, job.output)
                         if r["task"] in victim and r["processor"] == "w0"
                         and r["t"] > killed_at]
                resumed = min(after) if after else None
        if resumed is None:
            raise RuntimeError("the killed worker's tasks never resumed")
        restores: dict[str, Any] = {}
        deadline = time.monotonic() + 60  # stats come with the heartbeat after a batch
        while not set(victim) <= set(restores) and time.monotonic() < deadline:
            time.sleep(1)
            restores = job.stats("w0").get("stateRestores", {})
        moved = [restores.get(t, {}) for t in victim]
        return (resumed - killed_at, sum(int(r.get("bytes", 0)) for r in moved),
                ",".join(sorted({str(r.get("source")) for r in moved})))
    finally:
        job.close()


@dataclass(frozen=True, slots=True)
class ScaleOut:
    """What one scale-out cost (issue #52's curve)."""

    seconds: float  # the second worker's join (first model naming it) to balanced
    gap_s: float  # the longest pause between two outputs of a task that moved
    steady_gap_s: float  # the same before the join (the batches' own cadence)
    downloaded: int  # bytes the new worker's restores downloaded for its tasks


def max_gap(times: list[float]) -> float:
    """The longest interval between consecutive times (sorted here)."""
    ordered = sorted(times)
    return max((b - a for a, b in pairwise(ordered)), default=0.0)


def scale_out(kafka: LocalKafka, s3: LocalS3, root: Path, mb: int, probing_s: float,
              event_driven: bool, logs: Path | None = None) -> ScaleOut:
    """A second worker joins one that runs every task: seconds from its join to the
    balanced model, the output gap of the tasks that moved (KIP-441: each keeps running
    on its old owner while the new one warms up from the blob store), and the bytes the
    new worker downloaded."""
    keys = mb * 1024 * 1024 // PROFILE_BYTES
    min_interval = 1000 if event_driven else int(probing_s * 1000)
    job = Job(kafka, s3, root, keys, "--lease-ttl-ms", "10000", "--probing-interval-ms",
              str(int(probing_s * 1000)), "--probing-min-interval-ms", str(min_interval),
              "--acceptable-recovery-lag", "2000")
    try:
        job.producer.send(keys)
        job.start_worker("w0")
        wait_output(kafka, job.output, job.producer.total, timeout_s=900 + keys / 100)
        with feeding(job.producer, 50, 0.5):  # 100 records/s throughout, joined or not
            time.sleep(10)
            started = time.time()
            job.start_worker("w1")
            joined = balanced = None
            deadline = time.monotonic() + 20 * probing_s + 300 + keys / 1000
            while time.monotonic() < deadline:
                time.sleep(0.5)
                model = job.model()
                if joined is None and "w1" in model["containers"]:
                    joined = time.monotonic()
                if len(actives(model, "w1")) == 2 and model["barrier"] == "done":
                    balanced = time.monotonic()
                    break
            if joined is None or balanced is None:
                raise RuntimeError("never balanced")
            moved = tuple(actives(model, "w1"))
            time.sleep(10)  # the moved tasks' output on their new owner
        out = [r for r in read_output(kafka, job.output) if r["task"] in moved]
        ended = time.time()
        restores: dict[str, Any] = {}
        wait_until = time.monotonic() + 60  # stats come with the heartbeat after a batch
        while not set(moved) <= set(restores) and time.monotonic() < wait_until:
            time.sleep(1)
            restores = job.stats("w1").get("stateRestores", {})
        downloaded = sum(int(restores.get(t, {}).get("bytes", 0)) for t in moved)
        downloaded += standby_downloads(root / "w1.log", moved)
        gaps = [max_gap([r["t"] for r in out if r["task"] == t and started <= r["t"] <= ended])
                for t in moved]
        steady = [max_gap([r["t"] for r in out if r["task"] == t
                           and started - 10 <= r["t"] < started]) for t in moved]
        return ScaleOut(balanced - joined, max(gaps), max(steady), downloaded)
    finally:
        job.close()
        if logs is not None:  # kept for a look at the handover
            logs.mkdir(parents=True, exist_ok=True)
            for log in root.glob("*.log"):
                shutil.copy(log, logs / f"{root.name}-{log.name}")


def standby_downloads(log: Path, tasks: tuple[str, ...]) -> int:
    """Bytes a worker's standby copies of ``tasks`` fetched (its log's lines: a warm-up
    is a standby until its task moves, and the move then restores from local files)."""
    found = 0
    for line in log.read_text(errors="replace").splitlines():
        m = _FETCHED.search(line)
        if m is not None and m.group(1) in tasks:
            found += int(m.group(2))
    return found


@dataclass(frozen=True, slots=True)
class Rescale:
    """What a factor split and the merge back cost one task of ``--mb`` MB (#52)."""

    split_s: float  # the parent's last output to its slower child's first
    merge_s: float  # the children's last output to the merged task's first
    steady_gap_s: float  # the longest gap between two outputs before the split
    # the same pauses by when the output reached Kafka (the records' timestamps), not
    # when the task processed it: work a batch does after its records (its store's
    # close, its commit) delays these, not the ones above
    split_written_s: float
    merge_written_s: float


def _task_cell(name: str) -> tuple[int, int, int]:
    """(partition, key bucket, factor) of a task named ``Partition P_B_F`` (or
    ``Partition P``: factor 1)."""
    cell = name.removeprefix("Partition ").split("_")
    if len(cell) == 1:
        return int(cell[0]), 0, 1
    return int(cell[0]), int(cell[1]), int(cell[2])


def rescale(kafka: LocalKafka, s3: LocalS3, root: Path, mb: int, logs: Path | None = None,
            merge_after_s: float = 10.0, split_after_s: float = 10.0,
            feed_every_s: float = 0.5, worker_args: tuple[str, ...] = ()) -> Rescale:
    """One task (one partition, factor 1) holding ``mb`` MB on one worker under 100
    records/s: ``POST /scale`` 2 (the state splits), then, ``merge_after_s`` after the
    split took over, 1 (it merges back); the split ``split_after_s`` after the state was
    written (the store still compacting what the load wrote). The pause of each: the
    last output of the task(s) before to the first output of the one(s) after, for the
    same keys (issue #52: flat in the state's size). The records come in bursts every
    ``feed_every_s`` (100 records/s in all): with bursts every 0.5 s no pause is below
    0.5 s, and one that misses a burst's first trigger is 0.75 s (the worker's 250 ms
    trigger); 0.05 s measures the pause itself."""
    keys = mb * 1024 * 1024 // PROFILE_BYTES
    job = Job(kafka, s3, root, keys, "--lease-ttl-ms", "10000", partitions=1, factor=1,
              worker_args=worker_args)
    try:
        job.producer.send(keys)  # every key once: the state reaches its size
        job.start_worker("w0")
        wait_output(kafka, job.output, job.producer.total, timeout_s=900 + keys / 100)
        changes: dict[int, float] = {}
        with feeding(job.producer, max(1, round(100 * feed_every_s)), feed_every_s):
            time.sleep(split_after_s)
            for factor in (2, 1):
                changes[factor] = time.time()
                httpx.post(f"{job.server.url}/scale", json={"elasticityFactor": factor},
                           timeout=30).raise_for_status()
                deadline = time.monotonic() + 600
                while time.monotonic() < deadline:
                    time.sleep(0.5)
                    model = job.model()
                    if int(model["config"]["elasticityFactor"]) == factor \
                            and model["barrier"] == "done":
                        break
                else:
                    raise RuntimeError(f"factor {factor} never took over")
                # the new tasks' output (after a split, also the time its children have
                # to finish the compactions they inherit before the merge)
                time.sleep(merge_after_s if factor == 2 else 10)
        out = read_json_records(kafka.bootstrap, job.output, stamp="written")
        factor_of = {name: _task_cell(name)[2] for name in {r["task"] for r in out}}

        def pauses(at: str) -> tuple[float, float]:
            """(split, merge) pauses by the records' field ``at``."""
            before_merge = [r for r in out if r["t"] < changes[1]]
            parent_last = max(r[at] for r in before_merge if factor_of[r["task"]] == 1)
            split = max(min(r[at] for r in out if r["task"] == child) - parent_last
                        for child, f in factor_of.items() if f == 2)
            children_last = max(r[at] for r in out if factor_of[r["task"]] == 2)
            merge = min(r[at] for r in out if r["t"] >= changes[1]
                        and factor_of[r["task"]] == 1) - children_last
            return split, merge

        steady = max_gap([r["t"] for r in out if changes[2] - 10 <= r["t"] < changes[2]])
        return Rescale(*pauses("t"), steady, *pauses("written"))
    finally:
        job.close()
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            for log in root.glob("*.log"):
                shutil.copy(log, logs / f"{root.name}-{log.name}")


def throughput(kafka: LocalKafka, s3: LocalS3, root: Path, records: int, keys: int,
               stateful: bool) -> float:
    job = Job(kafka, s3, root, keys, "--lease-ttl-ms", "10000", stateful=stateful)
    try:
        job.producer.send(records)
        job.start_worker("w0", "bench.stateful:" + ("profile_task" if stateful
                                                    else "stateless_task"), stateful)
        out = wait_output(kafka, job.output, records)
        times = sorted(r["t"] for r in out)
        return float(len(out) / (times[-1] - times[0]))
    finally:
        job.close()


def factor_change(kafka: LocalKafka, s3: LocalS3, root: Path, keys: int, rate: int,
                  stateful: bool) -> dict[str, float]:
    """Two workers at factor 2 under a steady load; a split to 4, then a merge back to 2.
    Latency (processing time minus produce time) at steady state, and the worst latency
    of records produced within 30 s after each change: the dip a factor change costs."""
    job = Job(kafka, s3, root, keys, "--lease-ttl-ms", "10000", stateful=stateful)
    app = "bench.stateful:" + ("profile_task" if stateful else "stateless_task")
    try:
        for pid in ("w0", "w1"):
            job.start_worker(pid, app, stateful)
        stop = threading.Event()

        def produce() -> None:
            while not stop.is_set():
                job.producer.send(rate // 10)
                time.sleep(0.1)

        feeder = threading.Thread(target=produce, daemon=True)
        feeder.start()
        wait_output(kafka, job.output, 1)
        time.sleep(30)  # steady state
        changes = {}
        for factor in (4, 2):
            changes[factor] = time.time()
            httpx.post(f"{job.server.url}/scale", json={"elasticityFactor": factor},
                       timeout=30).raise_for_status()
            time.sleep(40)
        stop.set()
        feeder.join(30)
        out = wait_output(kafka, job.output, job.producer.total)
        first_change = changes[4]
        steady = sorted(r["t"] - r["sent"] for r in out
                        if first_change - 20 < r["sent"] < first_change)
        figures = {"steady p50 s": steady[len(steady) // 2]}
        for factor, at in changes.items():
            window = [r["t"] - r["sent"] for r in out if at <= r["sent"] < at + 30]
            figures[f"worst after -> {factor}, s"] = max(window)
        return figures
    finally:
        job.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=40, help="state of the job, MB")
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--probing-interval-s", type=float, default=60.0)
    parser.add_argument("--event-only", action="store_true",
                        help="scale-out: event-driven probing only (not the timer alone)")
    parser.add_argument("--only", choices=["failover", "scale-out", "throughput",
                                           "factor-change", "rescale"])
    parser.add_argument("--split-after-s", type=float, default=10.0,
                        help="rescale: seconds of steady load between the state written "
                             "and the split")
    parser.add_argument("--merge-after-s", type=float, default=10.0,
                        help="rescale: seconds between the split taking over and the merge")
    parser.add_argument("--feed-every-s", type=float, default=0.5,
                        help="rescale: the 100 records/s come in bursts this often")
    parser.add_argument("--logs", type=Path, default=None,
                        help="a folder to copy the workers' logs to")
    parser.add_argument("--worker-log-level", default=None,
                        help="rescale: the workers' --log-level (e.g. "
                             "INFO,coxswain.worker.batches=DEBUG)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} at start", flush=True)
    os.environ.update(CREDENTIALS)
    kafka = LocalKafka.create().start()
    s3 = LocalS3.start()
    try:
        with tempfile.TemporaryDirectory(prefix="coxswain-bench-stateful-") as tmp:
            root = Path(tmp)
            if args.only in (None, "failover"):
                print("| failover (kill -9) | seconds to output resumed | MB downloaded | "
                      "restore |\n|---|---|---|---|", flush=True)
                for n in (0, 1):
                    s, moved, source = failover(kafka, s3, root / f"failover-{n}", args.mb, n)
                    print(f"| {n} standby | {s:.1f} | {moved / 1e6:.1f} | {source} |",
                          flush=True)
            if args.only in (None, "scale-out"):
                print(f"\n| scale-out 1 -> 2 workers, {args.mb} MB (timer "
                      f"{args.probing_interval_s:.0f} s) | seconds from join to balanced | "
                      "longest output gap of a moved task, s (steady before) | "
                      "MB downloaded |\n|---|---|---|---|", flush=True)
                for event in (True, False)[:1 if args.event_only else 2]:
                    m = scale_out(kafka, s3, root / f"scale-{event}", args.mb,
                                  args.probing_interval_s, event, args.logs)
                    print(f"| {'event-driven probing' if event else 'timer alone'} "
                          f"| {m.seconds:.1f} | {m.gap_s:.2f} ({m.steady_gap_s:.2f}) | "
                          f"{m.downloaded / 1e6:.0f} |", flush=True)
            if args.only in (None, "rescale"):
                print(f"\n| one task of {args.mb} MB, one worker, 100 records/s | "
                      "split 1 -> 2, s | merge 2 -> 1, s | steady gap, s |\n|---|---|---|---|",
                      flush=True)
                r = rescale(kafka, s3, root / "rescale", args.mb, args.logs,
                            args.merge_after_s, args.split_after_s, args.feed_every_s,
                            ("--log-level", args.worker_log_level)
                            if args.worker_log_level else ())
                print(f"| pause (last output before to first after) | {r.split_s:.2f} | "
                      f"{r.merge_s:.2f} | {r.steady_gap_s:.2f} |", flush=True)
                print(f"| the same, by when the output reached Kafka | "
                      f"{r.split_written_s:.2f} | {r.merge_written_s:.2f} | |", flush=True)
            if args.only in (None, "throughput"):
                print("\n| one worker, 2 cores | records/s | x stateless |\n|---|---|---|",
                      flush=True)
                keys = args.mb * 1024 * 1024 // PROFILE_BYTES
                base = throughput(kafka, s3, root / "plain", args.records, keys, False)
                print(f"| stateless | {base:,.0f} | 1.00 |", flush=True)
                rate = throughput(kafka, s3, root / "state", args.records, keys, True)
                print(f"| per-key state, backed up to S3 | {rate:,.0f} | {rate / base:.2f} |",
                      flush=True)
            if args.only in (None, "factor-change"):
                print("\n| factor 2 -> 4 -> 2, 2 workers, 400 records/s | steady p50 s | "
                      "worst after the split, s | worst after the merge, s |\n"
                      "|---|---|---|---|", flush=True)
                keys = args.mb * 1024 * 1024 // PROFILE_BYTES
                for stateful in (False, True):
                    f = factor_change(kafka, s3, root / f"change-{stateful}", keys, 400,
                                      stateful)
                    print(f"| {'stateful' if stateful else 'stateless'} | "
                          f"{f['steady p50 s']:.2f} | {f['worst after -> 4, s']:.2f} | "
                          f"{f['worst after -> 2, s']:.2f} |", flush=True)
    finally:
        s3.stop()
        kafka.destroy()
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
