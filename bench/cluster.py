"""One Coxswain worker on ``local[2]`` against the same worker on a Spark standalone
cluster of two executors of one core each (a master and two Spark workers on this
machine, each Spark worker with its own folder), stateless and stateful, in one session.

The job: ``process_task`` over a backlog on a topic of 4 partitions at elasticity factor
4 (16 tasks), 1 ms of CPU per record (a busy loop, so the two shapes have the same two
cores to spend); stateful, a per-key counter in task state, backed up to a folder blob
store both shapes reach. Figures: records/s over the second half of the records (by the
end of their work: past Spark's start and the batch size's ramp), and over all of them.

Run: python -m bench.cluster [--records 20000] [--only stateless,stateful]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from bench.elasticity import produce, read_output, steady_rate, topics
from service.local.kafka import LocalKafka
from service.local.ports import stop_process_group
from tests.infra.spark_cluster import SparkCluster
from tests.service.server import Server


def run(kafka: LocalKafka, source: str, n: int, tmp: Path, master: str, stateful: bool,
        extra: list[str]) -> dict[str, float]:
    """One worker over the whole backlog: its rates, and (stateful) the wrong counts."""
    out_topic = f"out-{uuid.uuid4().hex[:8]}"
    topics(kafka, (out_topic, 1))
    data = tmp / uuid.uuid4().hex[:8]
    data.mkdir()
    server = Server(data, ["--kafka-bootstrap", kafka.bootstrap, "--input", f"kafka.{source}",
                           "--elasticity-factor", "4", "--debounce-ms", "100",
                           "--log-level", "WARNING",
                           *(["--stateful"] if stateful else [])]).start()
    state = ["--stateful", "--state-dir", str(data / "state"),
             "--blob-store", f"file://{tmp / 'blobs'}"] if stateful else []
    worker = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "worker", "--coordinator", server.url,
         "--api", "task",
         "--app", f"bench.cluster_apps:{'count' if stateful else 'echo'}_task",
         "--output-topic", out_topic, "--kafka-bootstrap", kafka.bootstrap,
         "--spark-master", master, "--processor-id", "w0", "--log-level", "WARNING",
         *state, *extra],
        stdout=(data / "worker.log").open("wb"), stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        out = read_output(kafka, out_topic, n)
    finally:
        stop_process_group(worker, grace_s=60)
        server.stop()
    records = [r for _, r in out]
    start = min(r["t0"] for r in records)
    end = max(r["t"] for r in records)
    wrong = sum(1 for r in records if stateful and r["count"] != r["seq"] + 1)
    return {"steady": steady_rate(out), "all": len(records) / max(0.001, end - start),
            "wrong": wrong}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--only", default="stateless,stateful")
    args = parser.parse_args()
    kinds = [k for k in args.only.split(",") if k]
    kafka = LocalKafka.create().start()
    rows: list[tuple[str, str, dict[str, float]]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            cluster = SparkCluster(tmp / "cluster", workers=2, cores=1)
            (tmp / "cluster").mkdir()
            cluster.start()
            try:
                shapes = {"local[2]": ("local[2]", []),
                          "cluster, 2 executors x 1 core": (cluster.master_url, [
                              "--conf", "spark.driver.host=127.0.0.1",
                              "--conf", "spark.executor.memory=512m"])}
                for kind in kinds:
                    source = f"in-{uuid.uuid4().hex[:8]}"
                    topics(kafka, (source, 4))
                    produce(kafka, source, args.records, 5000)
                    for name, (master, extra) in shapes.items():
                        load = os.getloadavg()[0]
                        figures = run(kafka, source, args.records, tmp, master,
                                      kind == "stateful", extra)
                        rows.append((kind, name, figures))
                        print(f"  {kind}, {name}: {figures['steady']:,.0f} records/s "
                              f"steady, {figures['all']:,.0f} over all, "
                              f"{int(figures['wrong'])} wrong counts (load before "
                              f"{load:.1f})", flush=True)
            finally:
                cluster.stop()
    finally:
        kafka.destroy()
    print("| job | shape | records/s (steady) | records/s (all) | x local[2] | wrong counts |")
    print("|---|---|---|---|---|---|")
    base: dict[str, float] = {}
    for kind, name, f in rows:
        base.setdefault(kind, f["steady"])
        print(f"| {kind} | {name} | {f['steady']:,.0f} | {f['all']:,.0f} | "
              f"{f['steady'] / base[kind]:.2f} | {int(f['wrong'])} |")


if __name__ == "__main__":
    main()
