"""Task state: backup and restore of a task holding ~100 MB of state, on a local folder
and on an S3 API server (moto, started here), with host affinity against without.

    .venv/bin/python -m bench.state [--mb 100] [--runs 3]

Rows (medians): the first backup (everything uploaded); an incremental backup after a
batch that changed 1% of the keys; a restore on the host that made the snapshot (the
committed snapshot is here: host affinity), on a host holding the previous snapshot
(only the new files fetched), and on a host with nothing (full download). The ratio
column is each restore's time over the full download's, measured in the same run.
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
from typing import TypeVar

from service.local.s3 import CREDENTIALS, LocalS3
from worker.state.backup import Uploader
from worker.state.blobs import ObjectBlobStore, open_blob_store
from worker.state.restore import open_live, restore_snapshot
from worker.state.snapshot import Digests, snapshot_dir

T = TypeVar("T")
TASK = "Partition 0_1_4"
VALUE_BYTES = 1024


def build(state_dir: Path, mb: int) -> tuple[Path, Path]:
    """A live store of ``mb`` MB of per-key state, snapshot 1; then 1% changed, snapshot 2."""
    keys = mb * 1024 * 1024 // VALUE_BYTES
    with open_live(state_dir, TASK, None) as store:
        for start in range(0, keys, 10_000):
            for i in range(start, min(keys, start + 10_000)):
                store.set_bytes(f"customer-{i}", "profile", os.urandom(VALUE_BYTES))
            store.commit()
        first = store.snapshot(snapshot_dir(state_dir, TASK, "1000-1"))
        for i in range(0, keys, 100):
            store.set_bytes(f"customer-{i}", "profile", os.urandom(VALUE_BYTES))
        store.commit()
        second = store.snapshot(snapshot_dir(state_dir, TASK, "2000-2"))
    return first, second


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def run_once(blobs: ObjectBlobStore, root: Path, mb: int) -> dict[str, tuple[float, int]]:
    """Seconds and bytes moved per step."""
    here = root / "host-a"
    first, second = build(here, mb)
    uploader = Uploader(blobs)
    out: dict[str, tuple[float, int]] = {}
    s, full = timed(lambda: uploader.upload(TASK, "1000-1", first, Digests()))
    out["backup, first (everything)"] = (s, full.uploaded_bytes)
    uploader.committed(full.index)
    s, inc = timed(lambda: uploader.upload(TASK, "2000-2", second, Digests()))
    out["backup, 1% of keys changed"] = (s, inc.uploaded_bytes)
    marker = inc.marker
    s, r = timed(lambda: restore_snapshot(here, marker, blobs, Digests()))
    out["restore, snapshot here (host affinity)"] = (s, r.downloaded_bytes)
    older = root / "host-b"
    restore_snapshot(older, full.marker, blobs, Digests())
    s, r = timed(lambda: restore_snapshot(older, marker, blobs, Digests()))
    out["restore, previous snapshot here"] = (s, r.downloaded_bytes)
    s, r = timed(lambda: restore_snapshot(root / "host-c", marker, blobs, Digests()))
    out["restore, nothing here (full download)"] = (s, r.downloaded_bytes)
    return out


def measure(name: str, make: Callable[[], ObjectBlobStore], mb: int, runs: int) -> list[str]:
    samples: dict[str, list[tuple[float, int]]] = {}
    for _ in range(runs):
        root = Path(tempfile.mkdtemp(prefix="coxswain-bench-state-"))
        try:
            for step, figures in run_once(make(), root, mb).items():
                samples.setdefault(step, []).append(figures)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    full = statistics.median(s for s, _ in samples["restore, nothing here (full download)"])
    rows = []
    for step, values in samples.items():
        seconds = statistics.median(s for s, _ in values)
        moved = statistics.median(b for _, b in values) / 1e6
        ratio = f"{seconds / full:.3f}" if step.startswith("restore") else "-"
        rows.append(f"| {name:6} | {step:40} | {seconds:8.3f} | {moved:8.1f} | {ratio:>6} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {args.mb} MB of state, median of "
          f"{args.runs} runs\n")
    print("| store  | step                                     | seconds  | MB moved | ratio  |")
    print("|--------|------------------------------------------|----------|----------|--------|")
    for line in measure("file", lambda: open_blob_store(
            f"file://{tempfile.mkdtemp(prefix='coxswain-bench-blobs-')}"), args.mb, args.runs):
        print(line, flush=True)
    os.environ.update(CREDENTIALS)
    s3 = LocalS3.start()
    try:
        def bucket() -> ObjectBlobStore:
            name = f"bench-{uuid.uuid4().hex[:8]}"
            s3.create_bucket(name)
            return open_blob_store(f"s3://{name}/job", endpoint=s3.endpoint)

        for line in measure("s3", bucket, args.mb, args.runs):
            print(line, flush=True)
    finally:
        s3.stop()


if __name__ == "__main__":
    main()
