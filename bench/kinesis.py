"""The Kinesis source on a local Kinesis API (kinesalite), two figures of issue #15:

* **read rate per shard**: a one-shard stream holding ``--records`` records, read to its
  end by (a) a plain boto3 loop (GetShardIterator TRIM_HORIZON, then GetRecords until
  caught up), the baseline; (b) the source's ``ShardReader`` alone, same process; (c) the
  Spark source in a streaming query (``foreachBatch`` counting rows, Spark start-up
  excluded: from the first batch's start to the batch that completes the count).
  Ratios against (a), same run.
* **split to first child record**: a coordinator and one Spark worker over a one-shard
  stream fed at ``--rate`` records/s; the time from the SplitShard call to the first
  output record that came from a child shard, split into: the coordinator listing the
  children (``--partition-poll-interval-ms``), the worker finishing the parent and
  committing its end, and the children's first batch.

Run: python -m bench.kinesis [--records 20000] [--rate 200] [--poll-ms 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
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
from service.local.kinesis import client as local_client
from service.local.orders import create_topics, read_json_records
from service.local.ports import stop_process_group
from tests.service.server import Server
from worker.sources.kinesis import EARLIEST, ShardReader


def client(kinesis: LocalKinesis) -> Any:
    return local_client(kinesis.endpoint)


def wait_active(c: Any, stream: str) -> None:
    while c.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"][
            "StreamStatus"] != "ACTIVE":
        time.sleep(0.02)


def filled_stream(c: Any, records: int) -> str:
    stream = f"bench-{uuid.uuid4().hex[:8]}"
    c.create_stream(StreamName=stream, ShardCount=1)
    wait_active(c, stream)
    payload = b"x" * 100
    for start in range(0, records, 500):
        c.put_records(StreamName=stream, Records=[
            {"PartitionKey": f"k{i % 1000}", "Data": payload}
            for i in range(start, min(records, start + 500))])
    return stream


def boto3_loop(c: Any, stream: str, records: int) -> float:
    started = time.perf_counter()
    it = c.get_shard_iterator(StreamName=stream, ShardId="shardId-000000000000",
                              ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    n = 0
    while n < records:
        out = c.get_records(ShardIterator=it, Limit=10_000)
        n += len(out["Records"])
        it = out["NextShardIterator"]
    return records / (time.perf_counter() - started)


def shard_reader(c: Any, stream: str, records: int) -> float:
    started = time.perf_counter()
    reader, offset, n = ShardReader(c, stream, {0: None}), EARLIEST, 0
    while n < records:
        got = reader.read(0, offset, limit=10_000)
        n += len(got.rows)
        offset = got.next_offset
    return records / (time.perf_counter() - started)


def spark_source(spark: Any, kinesis: LocalKinesis, stream: str, records: int) -> float:
    from pyspark.sql import DataFrame

    from worker.sources.kinesis import NAME
    from worker.sources.source_plan import PartitionStart, SourcePlan, write_plan

    seen, first, done = [0], [0.0], threading.Event()

    def count(batch: DataFrame, batch_id: int) -> None:
        if not first[0]:
            first[0] = time.perf_counter()
        seen[0] += batch.count()
        if seen[0] >= records:
            done.set()

    folder = tempfile.mkdtemp(prefix="bench-kinesis-")
    plan = Path(folder) / "plan.json"
    write_plan(plan, SourcePlan(1, {"0": PartitionStart("earliest")}))
    query = (spark.readStream.format(NAME).option("stream", stream)
             .option("endpoint", kinesis.endpoint).option("region", "us-east-1")
             .option("plan", str(plan))
             .option("maxRecordsPerShard", "10000").load()
             .writeStream.foreachBatch(count).option("checkpointLocation", folder)
             .trigger(processingTime="100 milliseconds").start())
    try:
        if not done.wait(600):
            raise RuntimeError(f"the Spark source read {seen[0]} of {records}")
        return records / (time.perf_counter() - first[0])
    finally:
        query.stop()


def split_to_first_child(kinesis: LocalKinesis, kafka: LocalKafka, rate: float,
                         poll_ms: int, root: Path) -> dict[str, float]:
    c = client(kinesis)
    stream = f"split-{uuid.uuid4().hex[:8]}"
    c.create_stream(StreamName=stream, ShardCount=1)
    wait_active(c, stream)
    output = f"out-{uuid.uuid4().hex[:8]}"
    create_topics(kafka.bootstrap, [(output, 1)])
    stop = threading.Event()
    seq = [0]

    def produce() -> None:
        while not stop.is_set():
            c.put_record(StreamName=stream, PartitionKey=f"k{seq[0] % 50}",
                         Data=str(seq[0]).encode())
            seq[0] += 1
            time.sleep(1 / rate)

    env = {**os.environ, **CREDENTIALS}
    server = Server(root / stream, ["--input", f"kinesis.{stream}", "--kinesis-endpoint",
                           kinesis.endpoint, "--partition-poll-interval-ms", str(poll_ms),
                           "--elasticity-factor", "2", "--debounce-ms", "100"],
                    dict(CREDENTIALS)).start()
    log = (root / f"worker-{stream}.log").open("ab")
    worker = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "worker", "--coordinator", server.url, "--api",
         "task", "--app", "tests.worker.apps:kinesis_echo_task", "--output-topic", output,
         "--kafka-bootstrap", kafka.bootstrap, "--kinesis-endpoint", kinesis.endpoint,
         "--processor-id", "w0", "--spark-master", "local[2]"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    feeder = threading.Thread(target=produce, daemon=True)
    try:
        feeder.start()
        while not read_json_records(kafka.bootstrap, output, idle_s=1):
            time.sleep(1)  # the worker runs
        time.sleep(3)
        split_at = time.time()
        c.split_shard(StreamName=stream, ShardToSplit="shardId-000000000000",
                      NewStartingHashKey=str(2**127))
        listed = waited = None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            model = server.client().get("/jobmodel").json()
            if listed is None and "1" in model["config"].get("shards", {}).get(
                    f"kinesis.{stream}", {}):
                listed = time.time() - split_at
            records = read_json_records(kafka.bootstrap, output, idle_s=0.5)
            child = [r for r in records if r["shard"] != 0]
            if child:
                waited = time.time() - split_at
                break
            time.sleep(0.2)
        if listed is None or waited is None:
            raise RuntimeError("no child record processed within 300 s")
        return {"listedS": listed, "firstChildRecordS": waited}
    finally:
        stop.set()
        stop_process_group(worker, grace_s=60)
        server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--poll-ms", type=int, default=1000)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    print(f"load average before: {os.getloadavg()}")
    from worker.runtime import spark_session, stop_spark
    from worker.sources.kinesis import KinesisDataSource

    os.environ.update(CREDENTIALS)
    kinesis = LocalKinesis.start()
    kafka: LocalKafka | None = None
    spark = spark_session("local[2]", "bench-kinesis")
    spark.dataSource.register(KinesisDataSource)
    try:
        c = client(kinesis)
        rates: dict[str, list[float]] = {"boto3 loop": [], "ShardReader": [],
                                         "Spark source": []}
        for _ in range(args.runs):
            stream = filled_stream(c, args.records)
            rates["boto3 loop"].append(boto3_loop(c, stream, args.records))
            rates["ShardReader"].append(shard_reader(c, stream, args.records))
            rates["Spark source"].append(spark_source(spark, kinesis, stream,
                                                      args.records))
        base = statistics.median(rates["boto3 loop"])
        print(f"\nread rate, one shard of {args.records} records (median of {args.runs}):")
        for name, values in rates.items():
            median = statistics.median(values)
            print(f"  {name:13s} {median:9.0f} records/s  ({median / base:.2f}x boto3 loop)")
        kafka = LocalKafka.create().start()
        root = Path(tempfile.mkdtemp(prefix="bench-kinesis-split-"))
        splits = [split_to_first_child(kinesis, kafka, args.rate, args.poll_ms, root)
                  for _ in range(args.runs)]
        print(f"\nsplit -> first child record processed ({args.rate:g} records/s, "
              f"--partition-poll-interval-ms {args.poll_ms}, median of {args.runs}):")
        for key in ("listedS", "firstChildRecordS"):
            print(f"  {key:18s} {statistics.median(s[key] for s in splits):6.2f} s "
                  f"(runs: {', '.join(f'{s[key]:.2f}' for s in splits)})")
    finally:
        stop_spark(spark)
        if kafka is not None:
            kafka.destroy()
        kinesis.stop()
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
