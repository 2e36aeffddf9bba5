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

    .venv/bin/python -m bench.rescale_state --space [--mb 1000] [--batches 24]

instead measures the space a split leaves behind (issue #52): the parent's state, split
on its host into both children (linked files cut by range deletions: each child's
folder names the parent's whole files), then ``--batches`` batches of each child
(``--updates`` of its own keys rewritten a batch, committed, compacted by the batch's
bounded slice, snapshotted and backed up as a worker does). After each: the disk the
children's folders take (a file linked twice counted once) against the state they hold,
and one child's alone against its half (as on a host of its own), until the range
deletions' files are compacted away.
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

from grouping.key_bucket import key_bucket
from grouping.key_hash import KeyHash
from service.local.s3 import CREDENTIALS, LocalS3
from worker.state.keys import LEGACY
from worker.state.restore import open_live
from worker.state.snapshot import snapshot_dir, task_dir
from worker.state.store import TaskStore
from worker.state.tasks import StateConfig, TaskStates, new_checkpoint_id, task_state

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


def disk_bytes(folders: list[Path]) -> int:
    """The bytes of every file under ``folders``, each inode once (snapshots and the
    children's stores share files by hard links)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder in folders:
        for f in folder.rglob("*"):
            if f.is_file():
                st = f.stat()
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_size
    return total


def space_run(root: Path, mb: int, batches: int, updates: int) -> list[str]:
    """Space over a split's children's batches (``--space``): one row per batch."""
    home = TaskStates(StateConfig(root / "home", f"file://{root / 'blobs'}", None))
    write_parent(home, mb, "bucket")
    parent = held(home, "P", -1, "1000-1")
    home.restore({f"C{c}": {"inputOffsets": offsets(c), "stateSources": [
        {**parent, "elasticityFactor": 2, "keyBuckets": [c], "nullKeys": c == 0,
         "keyHash": KEY_HASH.value}]} for c in (0, 1)})
    for c in (0, 1):
        held(home, f"C{c}", c, new_checkpoint_id())
    keys = mb * 1024 * 1024 // VALUE_BYTES
    sample = [f"customer-{i}" for i in range(0, keys, max(1, keys // (20 * updates)))]
    own = {c: [k for k in sample if key_bucket(k.encode(), 0, 2, KEY_HASH) == c]
           for c in (0, 1)}
    held_mb = keys * VALUE_BYTES / 1e6
    rows = []
    children = [task_dir(home.state_dir, f"C{c}") for c in (0, 1)]
    for n in range(batches + 1):
        started = time.perf_counter()
        if n:
            for c in (0, 1):
                cid = new_checkpoint_id()
                with task_state(str(home.state_dir), f"C{c}", cid, KEY_HASH) as store:
                    opened = store()
                    for j in range(updates):
                        key = own[c][(n * updates + j) % len(own[c])]
                        opened.set_bytes(key, "profile", os.urandom(VALUE_BYTES))
                held(home, f"C{c}", c, cid)
        took = time.perf_counter() - started
        used = disk_bytes(children) / 1e6
        alone = disk_bytes(children[:1]) / 1e6  # a child on a host of its own: its half
        rows.append(f"| {mb:6} | {n:5} | {took:6.2f} | {used:9.1f} | {used / held_mb:6.2f} "
                    f"| {alone:9.1f} | {alone / (held_mb / 2):6.2f} |")
    return rows


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
    parser.add_argument("--space", action="store_true",
                        help="the space a split's children take over their batches")
    parser.add_argument("--batches", type=int, default=24)
    parser.add_argument("--updates", type=int, default=1000, help="keys a batch rewrites")
    args = parser.parse_args()
    if args.space:
        print(f"load average {os.getloadavg()[0]:.2f}; a split's children, "
              f"{args.updates} keys rewritten per child and batch\n")
        print("| MB     | batch | both s | both MB   | x held | C0 MB     | x half |")
        print("|--------|-------|--------|-----------|--------|-----------|--------|")
        for mb in args.mb:
            root = Path(tempfile.mkdtemp(prefix="coxswain-bench-space-"))
            try:
                for line in space_run(root, mb, args.batches, args.updates):
                    print(line, flush=True)
            finally:
                shutil.rmtree(root, ignore_errors=True)
        print(f"\nload average {os.getloadavg()[0]:.2f} at end")
        return
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
