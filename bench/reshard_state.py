"""State across a Kinesis split (issue #26's benchmark): a one-shard stream whose task
holds ``--mb`` MB of per-key state is split while records flow; from the SplitShard call
to the first record of each child shard processed, and the bytes each child's state
restore downloaded, with the child on its parent's processor (its parent's snapshot on
the local disk) and on another processor (downloaded from the blob store).

Real kinesalite, Kafka (the output), a coordinator (embedded store, ``--stateful``,
factor 1) and Spark workers as processes, state backed up to a folder. Two scenarios,
``--runs`` each: one worker (both children on the parent's processor), and two workers
(the second idle until the split; the balanced assignment gives it a child).

    .venv/bin/python -m bench.reshard_state [--mb 50] [--runs 2] [--poll-ms 500]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from service.local.kafka import LocalKafka
from service.local.kinesis import CREDENTIALS, LocalKinesis
from service.local.kinesis import client as kinesis_client
from service.local.orders import create_topics
from service.local.ports import stop_process_group
from tests.service.server import Server

VALUE_BYTES = 1000  # state per key
SHARD0 = "shardId-000000000000"


def wait_active(c: Any, stream: str) -> None:
    while c.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"][
            "StreamStatus"] != "ACTIVE":
        time.sleep(0.02)


class FirstRecords:
    """Tails the output topic from its end: when each child shard's first record came."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        self._consumer = Consumer({"bootstrap.servers": bootstrap,
                                   "group.id": uuid.uuid4().hex, "log_level": 2})
        self._consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
        self.first: dict[int, tuple[float, str]] = {}  # shard -> (time, processor)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            msg = self._consumer.poll(0.1)
            if msg is None or msg.error() is not None:
                continue
            r = json.loads(msg.value() or b"{}")
            self.first.setdefault(int(r["shard"]), (time.time(), str(r["processor"])))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


def run(kinesis: LocalKinesis, kafka: LocalKafka, root: Path, mb: int, workers: int,
        poll_ms: int) -> list[dict[str, Any]]:
    c = kinesis_client(kinesis.endpoint)
    stream = f"reshard-{uuid.uuid4().hex[:8]}"
    c.create_stream(StreamName=stream, ShardCount=1)
    wait_active(c, stream)
    keys = mb * 1_000_000 // VALUE_BYTES
    for start in range(0, keys, 500):  # every key once: its state is the value (random:
        c.put_records(StreamName=stream, Records=[  # RocksDB would compress anything else)
            {"PartitionKey": f"customer-{i}", "Data": os.urandom(VALUE_BYTES)}
            for i in range(start, min(keys, start + 500))])
    output = f"out-{uuid.uuid4().hex[:8]}"
    create_topics(kafka.bootstrap, [(output, 1)])
    work = root / stream
    server = Server(work, ["--input", f"kinesis.{stream}", "--kinesis-endpoint",
                           kinesis.endpoint, "--partition-poll-interval-ms", str(poll_ms),
                           "--stateful", "--debounce-ms", "200"], dict(CREDENTIALS)).start()
    procs: list[subprocess.Popen[bytes]] = []
    env = {**os.environ, **CREDENTIALS}

    def worker(pid: str) -> subprocess.Popen[bytes]:
        log = (work / f"{pid}.log").open("ab")
        return subprocess.Popen(
            [sys.executable, "-m", "service.cli", "worker", "--coordinator", server.url,
             "--api", "task", "--app", "bench.reshard_state:pad_task", "--output-topic",
             output, "--kafka-bootstrap", kafka.bootstrap, "--kinesis-endpoint",
             kinesis.endpoint, "--processor-id", pid, "--location", f"host-{pid}",
             "--spark-master", "local[2]", "--stateful", "--state-dir",
             str(work / f"state-{pid}"), "--blob-store", f"file://{work / 'blobs'}"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    stop = threading.Event()
    sent = [0]

    def feed() -> None:  # a steady trickle on top: records for the children to process
        while not stop.is_set():
            c.put_record(StreamName=stream, PartitionKey=f"customer-{sent[0] % keys}",
                         Data=b"y")
            sent[0] += 1
            time.sleep(0.02)

    tail: FirstRecords | None = None
    try:
        procs.append(worker("w0"))
        with server.client() as api:
            # the whole state built and committed: the task's committed offset is past
            # every initial record
            deadline = time.monotonic() + 600
            while True:
                stats = {p["processorId"]: p.get("stats") or {}
                         for p in api.get("/status").json()["processors"]}
                size = sum((stats.get("w0") or {}).get("stateBytes", {}).values())
                if size >= mb * 900_000:
                    break
                assert time.monotonic() < deadline, f"state reached {size} bytes only"
                time.sleep(1)
            for i in range(1, workers):
                procs.append(worker(f"w{i}"))
            while len(api.get("/status").json()["processors"]) < workers:
                time.sleep(0.5)
            time.sleep(3)  # the join's version settled
            threading.Thread(target=feed, daemon=True).start()
            time.sleep(2)
            tail = FirstRecords(kafka.bootstrap, output)
            split_at = time.time()
            c.split_shard(StreamName=stream, ShardToSplit=SHARD0,
                          NewStartingHashKey=str(2**127))
            while len(tail.first) < 2 or not all(s in tail.first for s in (1, 2)):
                assert time.time() - split_at < 600, f"children seen: {tail.first}"
                time.sleep(0.1)
            time.sleep(2)  # the restores' figures reach the stats with a heartbeat
            restores = {p["processorId"]: (p.get("stats") or {}).get("stateRestores") or {}
                        for p in api.get("/status").json()["processors"]}
        out = []
        for shard in (1, 2):
            at, pid = tail.first[shard]
            task = f"Partition {shard}"
            restore = restores.get(pid, {}).get(task, {})
            out.append({"shard": shard, "processor": pid,
                        "onParentsProcessor": pid == "w0",
                        "firstRecordS": round(at - split_at, 2),
                        "source": restore.get("source"), "bytes": restore.get("bytes"),
                        "restoreS": restore.get("seconds")})
        return out
    finally:
        stop.set()
        if tail is not None:
            tail.close()
        for p in procs:
            stop_process_group(p, grace_s=60)
        server.stop()


def pad_task(ctx: Any, rows: Any) -> Any:
    """process_task: each key's state is its last value (``VALUE_BYTES`` of them) and a
    counter; one output record per input record, naming its shard."""
    import pandas as pd

    values = []
    for k, v, p in zip(rows["key"], rows["value"], rows["partition"], strict=True):
        if len(v) >= VALUE_BYTES:
            ctx.state.set_bytes(k, "value", bytes(v))
        count = ctx.state.get(k, "count", 0) + 1
        ctx.state.set(k, "count", count)
        values.append(json.dumps({"shard": int(p), "processor": ctx.processor_id,
                                  "count": count}))
    return pd.DataFrame({"key": list(rows["key"]), "value": values})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=50)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--poll-ms", type=int, default=500)
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()}")
    os.environ.update(CREDENTIALS)
    kinesis = LocalKinesis.start()
    kafka = LocalKafka.create().start()
    root = Path(tempfile.mkdtemp(prefix="bench-reshard-"))
    rows: list[dict[str, Any]] = []
    try:
        for workers in (1, 2):
            for _ in range(args.runs):
                for row in run(kinesis, kafka, root, args.mb, workers, args.poll_ms):
                    row["workers"] = workers
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        kafka.destroy()
        kinesis.stop()
    print(f"\nsplit of a shard holding {args.mb} MB of state -> first child record "
          f"processed (--partition-poll-interval-ms {args.poll_ms}):")
    for local in (True, False):
        picked = [r for r in rows if r["onParentsProcessor"] is local]
        if not picked:
            continue
        where = "on the parent's processor" if local else "on another processor"
        print(f"  child {where:26s} first record "
              f"{statistics.median(r['firstRecordS'] for r in picked):6.2f} s median "
              f"({', '.join(str(r['firstRecordS']) for r in picked)}), restore "
              f"{statistics.median(r['restoreS'] or 0 for r in picked):.2f} s, "
              f"downloaded {statistics.median(r['bytes'] or 0 for r in picked) / 1e6:.1f} MB "
              f"({', '.join(sorted({str(r['source']) for r in picked}))})")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
