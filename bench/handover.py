"""Handover latency and cost, old worker runtime against the new one (issue #30).

Each scenario runs a coordinator (embedded store), Kafka or kinesalite, and Spark workers
as processes; the workers of one runtime run from one checkout (``--new``, this one, and
``--old``, a checkout of the runtime that restarted its query at every change, with its
own ``.venv``). Changes, each from a steady state:

* ``scale-up`` / ``scale-down``: ``POST /scale`` 2 -> 4 / 4 -> 2, two workers;
* ``join``: a third worker starts (timed from its registration: Spark's start before it
  is no handover's);
* ``leave``: one of three stops gracefully (SIGTERM);
* ``kill``: one of two is killed -9 (its long poll's connection closes);
* ``split``: a Kinesis shard is split (timed from the parents' last record to the
  children's first);
* ``kill-restoring`` (on request, stateful): one of two is killed -9 while it holds a
  task with 100 MB of state, the blob store (moto's S3 API server) behind a 10 MB/s
  link: the survivor restores that task for about 10 s; timed to the first output of
  the victim's other tasks and of the big one.

Measured per change: seconds from the trigger to the first output under the new version
(a record whose ``version`` is the new one's or later), to the version's barrier done,
and the records the change cost: the rate after it settled (measured over the 8 s after
the window: a kill or a leave leaves fewer workers, a join more) times the window
minus what came out in it (``--window-s`` after the trigger), also in batches' worth of
output (``lostBatches``: the rate times the steady batch duration), and a timeline of
records out per half second from 3 s before the change. ``--stateful``: the counting
app with 4 ms per record (``tests.worker.apps:slow_count_task``, which an old checkout
may need added), state in a folder blob store, the coordinator with ``--stateful``, and
the records whose count is not seq + 1 reported. ``saturated``: a backlog bigger than
the workers take (the app waits 2 ms per record, 2 workers at ``local[1]``); ``quiet``:
records at a rate the workers keep up with. Steady state: records/s of one worker on a
0-work job and on the 2 ms job, factor 1 and 4.

    .venv/bin/python -m bench.handover --old /work/wt [--runs 3] [--only scale-up,kill]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from grouping.key_bucket import key_bucket
from grouping.key_hash import DEFAULT_KEY_HASH
from service.local.kafka import LocalKafka
from service.local.kinesis import CREDENTIALS, LocalKinesis
from service.local.kinesis import client as kinesis_client
from service.local.orders import create_topics
from service.local.ports import kill_process_group, stop_process_group
from service.local.s3 import LocalS3
from tests.infra.relay import Relay
from tests.service.server import Server

APPS = {"slow": "tests.worker.apps:slow_echo_task", "none": "tests.worker.apps:echo_task",
        "kinesis": "tests.worker.apps:kinesis_echo_task",
        "slow-count": "tests.worker.apps:slow_count_task",
        "slow-fat-count": "tests.worker.apps:slow_fat_count_task"}
WORK_S = {"slow": 0.004, "none": 0.0}  # what slow_echo_task waits per record
QUIET_RATE = 100.0  # records/s fed in the quiet mode (the workers take 300-400)
AFTER_S = 8.0  # seconds after the window the rate after a change is measured over
FAT_KEYS = 100  # kill-restoring: keys of 1 MB of state each, all in one task
FAT_TASK = "Partition 0_0_2"
SLOW_LINK = 10_000_000  # kill-restoring: bytes/s between the workers and the blob store


@dataclass
class Output:
    """Tails an output topic: (arrival time, record) of every record."""

    bootstrap: str
    topic: str
    seen: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Output:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": uuid.uuid4().hex,
                      "log_level": 2})
        c.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        while not self._stop.is_set():
            for m in c.consume(1000, 0.2):
                if m.error() is None:
                    self.seen.append((time.time(), json.loads(m.value() or b"{}")))
        c.close()

    def stop(self) -> None:
        self._stop.set()

    def rate(self, start: float, end: float) -> float:
        return sum(1 for t, _ in self.seen if start <= t < end) / max(1e-9, end - start)


@dataclass
class Rig:
    """One scenario's processes."""

    root: Path
    kafka: LocalKafka
    tree: Path  # the checkout whose runtime the workers run
    stateful: bool = False  # the workers keep state (a blob store in a folder)
    extra: tuple[str, ...] = ()  # more worker arguments (the last of an option wins)
    blob_store: tuple[str, ...] = ()  # --blob-store (and endpoint) instead of a folder
    server: Server | None = None
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def worker(self, pid: str, app: str, output: str, *extra: str, limit: int = 400
               ) -> None:
        log = (self.root / f"{pid}.log").open("ab")
        assert self.server is not None
        if self.stateful:
            blobs = self.blob_store or ("--blob-store", f"file://{self.root / 'blobs'}")
            extra = ("--stateful", "--state-dir", str(self.root / f"{pid}-state"), *blobs,
                     *extra)
        self.workers[pid] = subprocess.Popen(
            [str(self.tree / ".venv" / "bin" / "python"), "-m", "service.cli", "worker",
             "--coordinator", self.server.url, "--app", app, "--api", "task",
             "--output-topic", output, "--kafka-bootstrap", self.kafka.bootstrap,
             "--processor-id", pid, "--location", f"host-{pid}", "--spark-master",
             "local[1]", "--max-offsets-per-trigger", str(limit), *extra, *self.extra],
            cwd=self.tree, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **CREDENTIALS, "PYTHONPATH": str(self.tree)})

    def close(self) -> None:
        for w in self.workers.values():
            stop_process_group(w, grace_s=60)
        if self.server is not None:
            self.server.stop()


def produce(kafka: LocalKafka, topic: str, n: int, keys: int = 2000) -> None:
    # idempotent: a retried send on a loaded machine must not write a record twice (a
    # counting app would then count it twice)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True,
                  "linger.ms": 20, "log_level": 2})
    seq: dict[str, int] = {}
    for i in range(n):
        key = f"k{i * 7919 % keys}"
        seq[key] = seq.get(key, -1) + 1
        p.produce(topic, key=key.encode(), value=str(seq[key]).encode())
        if i % 20000 == 0:
            p.flush()
    p.flush()


def feeder(kafka: LocalKafka, topic: str, rate: float, stop: threading.Event,
           sent: list[int]) -> None:
    """Records at ``rate``/s until ``stop``, each key's values its sequence numbers (a
    counting app's count is then seq + 1); ``sent[0]``: how many so far."""
    p = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True,
                  "log_level": 2})
    seq: dict[str, int] = {}
    while not stop.wait(0.1):
        for _ in range(max(1, int(rate / 10))):
            key = f"k{sent[0] % 2000}"
            seq[key] = seq.get(key, -1) + 1
            p.produce(topic, key=key.encode(), value=str(seq[key]).encode())
            sent[0] += 1
        p.poll(0)
    p.flush()


def wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out: {what}")
        time.sleep(0.1)


def barrier_done(api: httpx.Client, version: int) -> bool:
    m = api.get("/jobmodel").json()
    return int(m["version"]) >= version and m["barrier"] == "done"


def registered(api: httpx.Client) -> set[str]:
    return {str(p["processorId"]) for p in api.get("/status").json()["processors"]}


def steady_batch_seconds(api: httpx.Client) -> float:
    """The workers' last batch durations (their heartbeat stats), the median."""
    found = [float(p["stats"]["batchSeconds"]) for p in api.get("/status").json()["processors"]
             if (p.get("stats") or {}).get("batchSeconds") is not None]
    return round(statistics.median(found), 2) if found else 0.0


def change(kind: str, rig: Rig, out: Output, api: httpx.Client, output: str,
           window_s: float) -> dict[str, float]:
    """Trigger ``kind`` from a steady state; what it cost."""
    before = int(api.get("/jobmodel").json()["version"])
    steady_from = time.time() - 8
    batch_s = steady_batch_seconds(api)
    t0 = time.time()
    if kind == "scale-up":
        api.post("/scale", json={"elasticityFactor": 4}).raise_for_status()
    elif kind == "scale-down":
        api.post("/scale", json={"elasticityFactor": 2}).raise_for_status()
    elif kind == "join":  # timed from its registration: Spark's start is not a handover
        rig.worker("w2", app(rig), output)
        wait(lambda: "w2" in registered(api), 240, "w2 registered")
        t0 = time.time()
    elif kind == "leave":
        rig.workers["w2"].send_signal(15)
    elif kind == "kill":
        victim = rig.workers.pop("w1")
        kill_process_group(victim.pid)
        victim.wait(30)
    wait(lambda: int(api.get("/jobmodel").json()["version"]) > before, 120,
         f"{kind}: a new version")
    version = int(api.get("/jobmodel").json()["version"])
    wait(lambda: barrier_done(api, version), 120, f"{kind}: barrier of {version}")
    barrier = time.time() - t0
    wait(lambda: any(r.get("version", 0) >= version and t >= t0 for t, r in out.seen), 120,
         f"{kind}: output under version {version}")
    first = min(t for t, r in out.seen if r.get("version", 0) >= version and t >= t0) - t0
    # the rate after the change settled (a kill or a leave leaves fewer workers, a join
    # more): what the window would have had, had the change taken no time
    time.sleep(max(0.0, t0 + window_s + AFTER_S - time.time()))
    before_rate = out.rate(steady_from, t0)
    after_rate = out.rate(t0 + window_s, t0 + window_s + AFTER_S)
    got = sum(1 for t, _ in out.seen if t0 <= t < t0 + window_s)
    lost = max(0.0, after_rate * window_s - got)
    print(json.dumps({"change": kind, "timeline": timeline(out, t0 - 3, t0 + window_s)}),
          flush=True)
    return {"firstOutputS": round(first, 2), "barrierS": round(barrier, 2),
            "lostRecords": round(lost), "steadyRate": round(before_rate, 1),
            "afterRate": round(after_rate, 1), "steadyBatchS": batch_s,
            # the cost in batches' worth of output (the target: at most one)
            "lostBatches": round(lost / max(1e-9, after_rate * batch_s), 2)}


def timeline(out: Output, start: float, end: float, step: float = 0.5) -> list[int]:
    """Records out per ``step`` seconds from ``start`` (the change at 3 s)."""
    counts = [0] * max(1, round((end - start) / step))
    for t, _ in out.seen:
        if start <= t < end:
            counts[min(len(counts) - 1, int((t - start) / step))] += 1
    return counts


def app(rig: Rig) -> str:
    """The scenarios' app: 4 ms per record, counting per key when stateful."""
    return APPS["slow-count" if rig.stateful else "slow"]


def count_errors(out: Output) -> int:
    """Records of a counting app whose count is not seq + 1 (state lost or applied
    twice)."""
    return sum(1 for _, r in out.seen if "count" in r and r["count"] != r["seq"] + 1)


def scenario(kind: str, tree: Path, kafka: LocalKafka, root: Path, saturated: bool,
             window_s: float, stateful: bool = False, extra: tuple[str, ...] = ()
             ) -> dict[str, float]:
    topic, output = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
    create_topics(kafka.bootstrap, [(topic, 4), (output, 1)])
    work = root / f"{tree.name}-{kind}-{uuid.uuid4().hex[:4]}"
    work.mkdir(parents=True)
    rig = Rig(work, kafka, tree, stateful, extra)
    stop = threading.Event()
    sent = [0]
    out = Output(kafka.bootstrap, output).start()
    try:
        if saturated:
            produce(kafka, topic, 200_000)  # more than the workers take in the run
        else:
            threading.Thread(target=feeder, args=(kafka, topic, QUIET_RATE, stop, sent),
                             daemon=True).start()
        factor = "4" if kind == "scale-down" else "2"
        rig.server = Server(work, ["--kafka-bootstrap", kafka.bootstrap, "--input",
                                   f"kafka.{topic}", "--elasticity-factor", factor,
                                   "--debounce-ms", "200",
                                   *(["--stateful"] if stateful else [])]).start()
        count = 3 if kind == "leave" else 2
        for i in range(count):
            rig.worker(f"w{i}", app(rig), output)
        with rig.server.client() as api:
            # steady: every worker in the model, its barrier done, output flowing 10 s
            wait(lambda: len(api.get("/jobmodel").json().get("containers", {})) == count
                 if api.get("/jobmodel").status_code == 200 else False, 240, "workers")
            v = int(api.get("/jobmodel").json()["version"])
            wait(lambda: barrier_done(api, v), 120, "first barrier")
            wait(lambda: out.rate(time.time() - 5, time.time()) > 0, 240, "output")
            if not saturated:  # quiet: the backlog of the workers' start drained first
                # (within 3 s of the feed: a batch and the output's own latency behind it)
                wait(lambda: len(out.seen) >= sent[0] - 3 * QUIET_RATE, 240,
                     "the backlog drained")
            time.sleep(10)
            row = change(kind, rig, out, api, output, window_s)
            if stateful:
                row["countErrors"] = count_errors(out)
            return row
    finally:
        stop.set()
        out.stop()
        rig.close()


def fat_keys(factor: int = 2) -> list[str]:
    """``FAT_KEYS`` keys of key bucket 0 under ``factor`` and a new job's key hash (all in
    ``FAT_TASK`` when written to partition 0)."""
    found: list[str] = []
    i = 0
    while len(found) < FAT_KEYS:
        if key_bucket(f"fat-{i}".encode(), 0, factor, DEFAULT_KEY_HASH) == 0:
            found.append(f"fat-{i}")
        i += 1
    return found


def fat_state_committed(api: httpx.Client) -> bool:
    """``FAT_TASK`` committed past its fat keys (their state backed up)."""
    r = api.get("/checkpoints", params={"taskName": FAT_TASK})
    if r.status_code != 200:
        return False
    offsets = r.json().get(FAT_TASK, {}).get("inputOffsets") or []
    return any(int(o["offset"]) > FAT_KEYS for o in offsets
               if o["ssp"]["partition"] == 0 and o["offset"].isdigit())


def kill_restoring(tree: Path, kafka: LocalKafka, root: Path, window_s: float,
                   extra: tuple[str, ...] = ()) -> dict[str, float]:
    """kill -9 of the worker holding a task with 100 MB of state (saturated, stateful,
    the blob store behind a 10 MB/s link): the survivor restores that task for about
    10 s; the victim's other tasks should not wait for it."""
    s3 = LocalS3.start()
    slow = Relay(("127.0.0.1", s3.port), bytes_per_s=SLOW_LINK)
    slow.restore()
    bucket = f"fat-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(bucket)
    topic, output = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
    create_topics(kafka.bootstrap, [(topic, 4), (output, 1)])
    work = root / f"{tree.name}-kill-restoring-{uuid.uuid4().hex[:4]}"
    work.mkdir(parents=True)
    rig = Rig(work, kafka, tree, True, extra,
              ("--blob-store", f"s3://{bucket}/job", "--blob-store-endpoint", slow.endpoint))
    out = Output(kafka.bootstrap, output).start()
    try:
        p = Producer({"bootstrap.servers": kafka.bootstrap, "log_level": 2})
        for key in fat_keys():
            p.produce(topic, key=key.encode(), value=b"0", partition=0)
        p.flush()
        produce(kafka, topic, 200_000)
        rig.server = Server(work, ["--kafka-bootstrap", kafka.bootstrap, "--input",
                                   f"kafka.{topic}", "--elasticity-factor", "2",
                                   "--debounce-ms", "200", "--stateful"]).start()
        for pid in ("w0", "w1"):
            rig.worker(pid, APPS["slow-fat-count"], output)
        with rig.server.client() as api:
            wait(lambda: len(api.get("/jobmodel").json().get("containers", {})) == 2
                 if api.get("/jobmodel").status_code == 200 else False, 240, "workers")
            wait(lambda: fat_state_committed(api), 300, "the fat task's state backed up")
            v = int(api.get("/jobmodel").json()["version"])
            wait(lambda: barrier_done(api, v), 120, "barrier")
            time.sleep(10)
            model = api.get("/jobmodel").json()
            victim = next(pid for pid, c in model["containers"].items()
                          if c["tasks"].get(FAT_TASK, {}).get("taskMode", "Active")
                          == "Active" and FAT_TASK in c["tasks"])
            moved = {n for n, t in model["containers"][victim]["tasks"].items()
                     if t.get("taskMode", "Active") == "Active"}
            t0 = time.time()
            kill_process_group(rig.workers.pop(victim).pid)
            wait(lambda: int(api.get("/jobmodel").json()["version"]) > v, 120, "a version")
            version = int(api.get("/jobmodel").json()["version"])

            def first(tasks: set[str]) -> float | None:
                times = [t for t, r in out.seen if t >= t0 and r.get("task") in tasks
                         and r.get("version", 0) >= version]
                return min(times) - t0 if times else None

            small = moved - {FAT_TASK}
            wait(lambda: first(small) is not None, 120, "the victim's small tasks' output")
            wait(lambda: first({FAT_TASK}) is not None, 300, "the fat task's output")
            wrong = [r for _, r in out.seen if "count" in r and r["count"] != r["seq"] + 1]
            if wrong:  # said, for the search of their cause
                print(json.dumps({"countErrorsFirst": wrong[:20], "victim": victim,
                                  "killedAt": t0, "work": str(work)}), flush=True)
            return {"firstOutputS": round(first(small) or 0.0, 2),
                    "fatTaskFirstOutputS": round(first({FAT_TASK}) or 0.0, 2),
                    "tasksMoved": len(moved), "countErrors": len(wrong)}
    finally:
        out.stop()
        rig.close()
        slow.cut()
        s3.stop()


def kinesis_split(tree: Path, kafka: LocalKafka, kinesis: LocalKinesis, root: Path
                  ) -> dict[str, float]:
    """A split of a one-shard stream fed at 50/s: from the parent's last record processed
    to the first child record processed."""
    c = kinesis_client(kinesis.endpoint)
    stream = f"split-{uuid.uuid4().hex[:6]}"
    c.create_stream(StreamName=stream, ShardCount=1)
    while c.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"][
            "StreamStatus"] != "ACTIVE":
        time.sleep(0.02)
    output = f"out-{uuid.uuid4().hex[:6]}"
    create_topics(kafka.bootstrap, [(output, 1)])
    work = root / f"{tree.name}-split-{uuid.uuid4().hex[:4]}"
    work.mkdir(parents=True)
    rig = Rig(work, kafka, tree)
    out = Output(kafka.bootstrap, output).start()
    stop = threading.Event()

    def feed() -> None:
        i = 0
        while not stop.wait(0.02):
            c.put_record(StreamName=stream, PartitionKey=f"k{i % 100}", Data=b"0")
            i += 1

    try:
        rig.server = Server(work, ["--input", f"kinesis.{stream}", "--kinesis-endpoint",
                                   kinesis.endpoint, "--partition-poll-interval-ms", "500",
                                   "--debounce-ms", "200"], dict(CREDENTIALS)).start()
        rig.worker("w0", APPS["kinesis"], output, "--kinesis-endpoint", kinesis.endpoint)
        threading.Thread(target=feed, daemon=True).start()
        wait(lambda: bool(out.seen), 240, "output")
        time.sleep(8)
        t0 = time.time()
        c.split_shard(StreamName=stream, ShardToSplit="shardId-000000000000",
                      NewStartingHashKey=str(2**127))
        wait(lambda: any(r["shard"] != 0 for _, r in out.seen), 240, "a child record")
        first_child = min(t for t, r in out.seen if r["shard"] != 0)
        last_parent = max(t for t, r in out.seen if r["shard"] == 0)
        return {"firstChildS": round(first_child - t0, 2),
                "beyondParentsEndS": round(first_child - last_parent, 2)}
    finally:
        stop.set()
        out.stop()
        rig.close()


def throughput(tree: Path, kafka: LocalKafka, root: Path, app: str, factor: int,
               extra: tuple[str, ...] = ()) -> float:
    """Records/s of one worker (``local[1]``) draining a backlog, Spark start excluded."""
    topic, output = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
    # a batch's cap above what a trigger interval takes (no cap on the rate measured)
    n, limit = (6000, 400) if app == "slow" else (200_000, 50_000)
    create_topics(kafka.bootstrap, [(topic, 2), (output, 1)])
    produce(kafka, topic, n)
    work = root / f"{tree.name}-rate-{uuid.uuid4().hex[:4]}"
    work.mkdir(parents=True)
    rig = Rig(work, kafka, tree, extra=extra)
    out = Output(kafka.bootstrap, output).start()
    try:
        rig.server = Server(work, ["--kafka-bootstrap", kafka.bootstrap, "--input",
                                   f"kafka.{topic}", "--elasticity-factor", str(factor),
                                   "--debounce-ms", "200"]).start()
        rig.worker("w0", APPS[app], output, limit=limit)
        wait(lambda: len(out.seen) >= n, 900, f"{n} records out")
        times = sorted(t for t, _ in out.seen)
        # from the first tenth to the last: the first batch's start excluded
        lo, hi = times[n // 10], times[-1]
        return (n - n // 10) / max(1e-9, hi - lo)
    finally:
        out.stop()
        rig.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", type=Path, required=True, help="checkout of the old runtime")
    p.add_argument("--new", type=Path, default=Path(__file__).resolve().parents[1])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--quiet-runs", type=int, default=None,
                   help="runs of each quiet-machine change (default: --runs)")
    p.add_argument("--window-s", type=float, default=15.0)
    p.add_argument("--only", default="", help="comma-separated parts to run")
    p.add_argument("--modes", default="saturated,quiet",
                   help="comma-separated: saturated, quiet")
    p.add_argument("--new-only", action="store_true",
                   help="run the new runtime only (against old runs of the same session)")
    p.add_argument("--stateful", action="store_true",
                   help="the changes with a counting app keeping state (a blob store in "
                        "a folder) instead of the stateless one")
    p.add_argument("--new-args", default="",
                   help="more worker arguments for the new runtime only, one string (e.g. "
                        "'--max-offsets-per-trigger 100000 --target-batch-ms 4000')")
    p.add_argument("--readers", default="",
                   help="comma-separated Kafka readers (python, jvm): the throughput part "
                        "runs the new runtime once with each (--kafka-reader), beside the "
                        "old runtime unless --new-only")
    args = p.parse_args()
    only = set(filter(None, args.only.split(",")))
    readers = [r for r in args.readers.split(",") if r]
    checkouts = (args.new,) if args.new_only else (args.old, args.new)

    def extra(tree: Path) -> tuple[str, ...]:
        return tuple(shlex.split(args.new_args)) if tree == args.new else ()
    print(f"load average before: {os.getloadavg()}", flush=True)
    kafka = LocalKafka.create().start()
    kinesis = LocalKinesis.start()
    root = Path(tempfile.mkdtemp(prefix="bench-handover-"))
    os.environ.update(CREDENTIALS)
    results: dict[str, dict[str, list[dict[str, float]]]] = {}
    try:
        for mode in [m for m in ("saturated", "quiet") if m in args.modes.split(",")]:
            for kind in ("scale-up", "scale-down", "join", "leave", "kill"):
                if only and kind not in only:
                    continue
                runs = args.runs if mode == "saturated" else (args.quiet_runs or args.runs)
                for tree in checkouts:
                    for _ in range(runs):
                        try:
                            row = scenario(kind, tree, kafka, root, mode == "saturated",
                                           args.window_s, args.stateful, extra(tree))
                        except Exception as e:  # one failed run: said, and the rest go on
                            print(json.dumps({"change": kind, "mode": mode,
                                              "tree": str(tree), "failed": str(e)}),
                                  flush=True)
                            continue
                        label = f"{mode}, stateful" if args.stateful else mode
                        results.setdefault(f"{kind} ({label})", {}).setdefault(
                            tree.name, []).append(row)
                        print(json.dumps({"change": kind, "mode": mode,
                                          "tree": str(tree), **row}), flush=True)
        if "kill-restoring" in only:  # stateful, a blob store server: on request only
            for tree in checkouts:
                for _ in range(args.runs):
                    try:
                        row = kill_restoring(tree, kafka, root, args.window_s, extra(tree))
                    except Exception as e:
                        print(json.dumps({"change": "kill-restoring", "tree": str(tree),
                                          "failed": str(e)}), flush=True)
                        continue
                    results.setdefault("kill -9, 100 MB restoring (saturated)", {}) \
                        .setdefault(tree.name, []).append(row)
                    print(json.dumps({"change": "kill-restoring", "tree": str(tree), **row}),
                          flush=True)
        if not only or "split" in only:
            for tree in checkouts:
                for _ in range(args.runs):
                    try:
                        row = kinesis_split(tree, kafka, kinesis, root)
                    except Exception as e:
                        print(json.dumps({"change": "split", "tree": str(tree),
                                          "failed": str(e)}), flush=True)
                        continue
                    results.setdefault("Kinesis split (quiet)", {}).setdefault(
                        tree.name, []).append(row)
                    print(json.dumps({"change": "split", "tree": str(tree), **row}),
                          flush=True)
        if not only or "throughput" in only:
            for app, factor in (("none", 1), ("slow", 1), ("slow", 4)):
                for tree in checkouts:
                    for reader in (readers if tree == args.new and readers else [""]):
                        more = ("--kafka-reader", reader) if reader else ()
                        rates = [throughput(tree, kafka, root, app, factor,
                                            (*extra(tree), *more))
                                 for _ in range(args.runs)]
                        print(json.dumps({"throughput": app, "factor": factor,
                                          "tree": str(tree), "reader": reader or None,
                                          "recordsPerSecond": [round(r) for r in rates]}),
                              flush=True)
    finally:
        kinesis.stop()
        kafka.destroy()
    print("\nmedians:")
    for change_name, trees in results.items():
        for tree_name, rows in trees.items():
            keys = rows[0].keys()
            print(f"  {change_name:26s} {tree_name:8s} " + "  ".join(
                f"{k} {statistics.median(r[k] for r in rows):g}" for k in keys))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
