"""Splitting and merging a task's state: time and bytes, on a local folder and on moto's
S3 API server (started here), for each state layout (``worker.state.keys``).

    .venv/bin/python -m bench.rescale_state [--mb 100 1000] [--runs 3] [--no-s3]
        [--layouts bucket legacy]

A task at factor 1 holds ``--mb`` MB of per-key state (1 KiB per key), written in the
bucket-ordered layout (a split links its files and cuts them by key range) or the legacy
one (a split reads every entry and rewrites its half: what every release before did),
and backs it up. Rows (medians of ``--runs``):

* split, on the parent's host: both children (factor 2) built from the parent's local
  snapshot (nothing downloaded: the time is reading and filtering the entries);
* split, on a new host: one child built there (the parent's snapshot downloaded);
* first backup of a child (its own snapshot uploaded: from then on it needs no parent
  blob);
* merge, on a new host: the factor-1 task built from both children's snapshots.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocksdict import Options, Rdict, WriteBatch

from grouping.key_hash import KeyHash
from service.local.s3 import CREDENTIALS, LocalS3
from worker.state.keys import LEGACY
from worker.state.restore import open_live
from worker.state.snapshot import snapshot_dir, task_dir
from worker.state.store import TaskStore
from worker.state.tasks import StateConfig, TaskStates, new_checkpoint_id

VALUE_BYTES = 1024


def offsets(bucket: int) -> list[dict[str, Any]]:
    return [{"ssp": {"system": "kafka", "stream": "orders", "partition": 0,
                     "keyBucket": bucket}, "offset": "1000"}]


def held(states: TaskStates, task: str, bucket: int, checkpoint_id: str) -> dict[str, Any]:
    """Back up ``task``'s newest snapshot; its stateSources entry."""
    body = states.back_up(checkpoint_id, {task: {"inputOffsets": offsets(bucket)}})
    states.committed(body)
    return {"taskName": task, "checkpointId": body[task]["checkpointId"],
            "stateCheckpointMarkers": body[task]["stateCheckpointMarkers"]}


KEY_HASH = KeyHash.XXHASH64


def write_parent(home: TaskStates, mb: int, layout: str) -> None:
    """The parent's state, ``mb`` MB of it, snapshotted as checkpoint 1000-1."""
    keys = mb * 1024 * 1024 // VALUE_BYTES
    with open_live(home.state_dir, "P", None) as store:
        if layout == "bucket":
            for start in range(0, keys, 10_000):
                for i in range(start, min(keys, start + 10_000)):
                    store.set_bytes(f"customer-{i}", "profile", os.urandom(VALUE_BYTES))
                store.commit()
    if layout == "legacy":  # as the release before the layout wrote it
        db = Rdict(str(task_dir(home.state_dir, "P") / "live"), Options(raw_mode=True))
        for start in range(0, keys, 10_000):
            batch = WriteBatch(raw_mode=True)
            for i in range(start, min(keys, start + 10_000)):
                batch.put(LEGACY.entry_key(f"customer-{i}".encode(), "profile"),
                          b"B" + os.urandom(VALUE_BYTES))
            db.write(batch)
        db.flush()
        db.close()
    with open_live_again(home, "P") as store:
        assert store.bucket_ordered == (layout == "bucket")
        store.snapshot(snapshot_dir(home.state_dir, "P", "1000-1"))


def open_live_again(home: TaskStates, task: str) -> TaskStore:
    return TaskStore(task_dir(home.state_dir, task) / "live", KEY_HASH)


def run_once(url: str, endpoint: str | None, root: Path, mb: int, layout: str
             ) -> dict[str, tuple[float, int]]:
    out: dict[str, tuple[float, int]] = {}
    home = TaskStates(StateConfig(root / "home", url, endpoint))
    write_parent(home, mb, layout)
    parent = held(home, "P", -1, "1000-1")

    def split(c: int) -> dict[str, Any]:
        return {"inputOffsets": offsets(c), "stateSources": [
            {**parent, "elasticityFactor": 2, "keyBuckets": [c], "nullKeys": c == 0,
             "keyHash": KEY_HASH.value}]}

    def timed(states: TaskStates, cps: dict[str, dict[str, Any]]) -> tuple[float, int]:
        started = time.perf_counter()
        states.restore(cps)
        return (time.perf_counter() - started,
                sum(int(states.restores[t]["bytes"]) for t in cps))

    elsewhere = TaskStates(StateConfig(root / "new-host", url, endpoint))
    out["split, new host (one child)"] = timed(elsewhere, {"C1": split(1)})
    out["split, parent's host (both children)"] = timed(home, {"C0": split(0),
                                                              "C1": split(1)})
    started = time.perf_counter()
    children = [held(home, f"C{c}", c, new_checkpoint_id()) for c in (0, 1)]
    # a task's first backup sends what its sources' blobs lack (a linked child: what its
    # cut wrote; a rewritten one: everything)
    sent = sum(home.uploaded[c["taskName"]] for c in children)
    out["first backup of both children"] = (time.perf_counter() - started, sent)
    merged = {"M": {"inputOffsets": offsets(-1), "stateSources": [
        {**children[c], "elasticityFactor": 2, "keyBuckets": [c], "nullKeys": c == 0,
         "keyHash": KEY_HASH.value} for c in (0, 1)]}}
    third = TaskStates(StateConfig(root / "third-host", url, endpoint))
    out["merge, new host"] = timed(third, merged)
    assert (task_dir(third.state_dir, "M") / "live").exists()
    out["merge, children's host"] = timed(home, {"M": merged["M"]})
    return out


def measure(name: str, store: Callable[[], tuple[str, str | None]], mb: int, runs: int,
            layout: str) -> list[str]:
    samples: dict[str, list[tuple[float, int]]] = {}
    for _ in range(runs):
        root = Path(tempfile.mkdtemp(prefix="coxswain-bench-rescale-"))
        try:
            url, endpoint = store()
            if url.startswith("file://"):
                url = f"file://{root / 'blobs'}"
            for step, figures in run_once(url, endpoint, root, mb, layout).items():
                samples.setdefault(step, []).append(figures)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    rows = []
    for step, values in samples.items():
        seconds = statistics.median(s for s, _ in values)
        moved = statistics.median(b for _, b in values)
        rows.append(f"| {mb:6} | {layout:6} | {name:4} | {step:38} | {seconds:7.2f} | "
                    f"{moved / 1e6:8.1f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, nargs="+", default=[100])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--layouts", nargs="+", choices=("bucket", "legacy"),
                        default=["bucket", "legacy"])
    parser.add_argument("--no-s3", action="store_true", help="the folder blob store only")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.mb} MB of state, median of "
          f"{args.runs} runs\n")
    print("| MB     | layout | blob | step                                   | seconds | "
          "MB moved |")
    print("|--------|--------|------|----------------------------------------|---------|"
          "----------|")
    for mb in args.mb:
        for layout in args.layouts:
            for line in measure("file", lambda: ("file://", None), mb, args.runs, layout):
                print(line, flush=True)
    if not args.no_s3:
        os.environ.update(CREDENTIALS)
        s3 = LocalS3.start()
        try:
            def bucket() -> tuple[str, str | None]:
                name = f"bench-{uuid.uuid4().hex[:8]}"
                s3.create_bucket(name)
                return f"s3://{name}/job", s3.endpoint

            for mb in args.mb:
                for layout in args.layouts:
                    for line in measure("s3", bucket, mb, args.runs, layout):
                        print(line, flush=True)
        finally:
            s3.stop()
    print(f"\nload average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
