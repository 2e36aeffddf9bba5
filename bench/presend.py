"""What sending a running task's new SST files ahead (``worker.state.presend``) does to
its commits' backups, and what it costs in bytes (issue #52: a handover waits for the
lost tasks' last commit, whose backup sends the files the batch's flush and RocksDB's
compactions wrote).

    .venv/bin/python -m bench.presend [--mb 1000] [--batch-mb 4] [--runs 2] [--file]

Each run writes ``--mb`` of new keys into a fresh store in batches of ``--batch-mb``
(a bulk load: the compactions it owes are what a commit sends), and after each batch
does what a worker's commit does: a snapshot, its backup to moto's S3 API server (or a
folder with ``--file``) timed, the index committed. Once with the pre-sender watching the
store, once without, alternated. Printed: the backups' median and p90 seconds (the
critical path of a handover's last commit), the bytes the backups sent, the bytes sent
ahead, and the run's wall time (the load's own speed beside the sends).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from service.local.s3 import CREDENTIALS, LocalS3
from worker.state.backup import Uploader
from worker.state.blobs import open_blob_store
from worker.state.presend import PreSender
from worker.state.restore import open_live
from worker.state.snapshot import Digests, snapshot_dir, task_dir

TASK = "Partition 0"
VALUE = 1000  # bytes a key


def one_run(root: Path, blob_url: str, endpoint: str | None, mb: int, batch_mb: int,
            ahead: bool) -> dict[str, Any]:
    state_dir = root / "state"
    blobs = open_blob_store(blob_url, endpoint)
    digests = Digests()
    over = threading.Event()
    presender = PreSender(blobs, digests, lambda t: task_dir(state_dir, t) / "live", 3600)
    uploader = Uploader(blobs, sent=presender.sent if ahead else None)
    live = open_live(state_dir, TASK, None)
    if ahead:
        presender.start(lambda: [TASK], over)
    per_batch = batch_mb * 1_000_000 // VALUE
    batches = mb // batch_mb
    backups: list[float] = []
    sent = 0
    previous: Path | None = None
    began = time.monotonic()
    try:
        for b in range(batches):
            for i in range(per_batch):
                live.set_bytes(f"key-{b}-{i}", "v", os.urandom(VALUE))
            live.commit()
            folder = live.snapshot(snapshot_dir(state_dir, TASK, f"{b + 1}-1"))
            started = time.perf_counter()
            result = uploader.upload(TASK, f"{b + 1}-1", folder, digests)
            backups.append(time.perf_counter() - started)
            uploader.committed(result.index)
            sent += result.uploaded_bytes
            if previous is not None:
                shutil.rmtree(previous)
            previous = folder
    finally:
        over.set()
        presender.join(10)
        live.close()
        presender.close()
    backups.sort()
    return {"median": statistics.median(backups),
            "p90": backups[int(len(backups) * 0.9)], "sent": sent,
            "ahead": presender.sent_bytes, "wall": time.monotonic() - began}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1000)
    parser.add_argument("--batch-mb", type=int, default=4)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--file", action="store_true", help="a folder, not moto's S3")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} at start", flush=True)
    os.environ.update(CREDENTIALS)
    s3 = None if args.file else LocalS3.start()
    rows: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    try:
        for n in range(args.runs):
            for ahead in ((False, True) if n % 2 == 0 else (True, False)):
                with tempfile.TemporaryDirectory(prefix="coxswain-bench-presend-") as tmp:
                    root = Path(tmp)
                    if s3 is None:
                        url, endpoint = f"file://{root / 'blobs'}", None
                    else:
                        bucket = f"presend-{uuid.uuid4().hex[:8]}"
                        s3.create_bucket(bucket)
                        url, endpoint = f"s3://{bucket}/job", s3.endpoint
                    got = one_run(root, url, endpoint, args.mb, args.batch_mb, ahead)
                rows[ahead].append(got)
                print(f"run {n + 1}, sent ahead {'on' if ahead else 'off'}: backup median "
                      f"{got['median']:.3f}s p90 {got['p90']:.3f}s, backups sent "
                      f"{got['sent'] / 1e6:.0f} MB, ahead {got['ahead'] / 1e6:.0f} MB, wall "
                      f"{got['wall']:.1f}s", flush=True)
    finally:
        if s3 is not None:
            s3.stop()
    print(f"\n| {args.mb} MB in {args.batch_mb} MB batches, medians of {args.runs} | backup "
          "median, s | backup p90, s | MB sent by backups | MB sent ahead | wall, s |\n"
          "|---|---|---|---|---|---|")
    for ahead in (False, True):
        r = rows[ahead]

        def med(k: str, r: list[dict[str, Any]] = r) -> float:
            return float(statistics.median(x[k] for x in r))

        print(f"| sent ahead {'on' if ahead else 'off'} | {med('median'):.3f} | "
              f"{med('p90'):.3f} | {med('sent') / 1e6:.0f} | {med('ahead') / 1e6:.0f} | "
              f"{med('wall'):.1f} |")
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
