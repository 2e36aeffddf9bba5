"""Point reads and writes of ``ctx.state`` per state layout (issue #52): what keying every
entry by the bit-reversed key hash costs a task's steady work against the legacy layout,
and what a merged task's store of two parts (``worker.state.parts``: each key's instance
found by a bisect) costs against one instance.

    .venv/bin/python -m bench.state_ops [--keys 200000] [--runs 5]
    .venv/bin/python -m bench.state_ops --against ../coxswain-757ef2d [--runs 5]

Each run counts ``--keys`` distinct keys twice in batches of 10 000 (a read and a write
per record, then a commit: what the counting app does) into a fresh store of each
layout, the layouts alternated; medians of ``--runs`` in records/s and their ratio.

``--against TREE``: the same work through ``TaskStore(path)`` of the checkout at ``TREE``
(say, the release before #52, whose stores had the legacy layout and their own RocksDB
options) and of this one (a new store: bucket-ordered), each in a process of its own,
alternated: the ratio #52's "point reads and writes within 5% of today's" asks for.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rocksdict import Options, Rdict

from grouping.key_hash import KeyHash
from worker.state.keys import LEGACY, bucket_range
from worker.state.store import TaskStore

BATCH = 10_000


def legacy_store(path: Path) -> TaskStore:
    """A store the release before the layout would have made (one legacy entry in it)."""
    db = Rdict(str(path), Options(raw_mode=True))
    db[LEGACY.entry_key(b"seed", "n")] = b"J0"
    db.close()
    store = TaskStore(path)
    assert store.layout is LEGACY
    return store


def parted_store(path: Path) -> TaskStore:
    """A merged task's store: an empty root and an empty part owning bucket 1 of 2."""
    half = path.with_name(path.name + "-half")
    with TaskStore(half / "live", KeyHash.XXHASH64) as child:
        child.set(b"seed", "n", 0)  # (its layout recorded; the seed cut unless in bucket 1)
        child.commit()
        child.snapshot(half / "snapshot")
    store = TaskStore(path, KeyHash.XXHASH64)
    assert store.adopt(half / "snapshot", [bucket_range(1, 2)]) and store.parts == 2
    shutil.rmtree(half)
    return store


def one_run(layout: str, keys: list[bytes], root: Path) -> float:
    """Records per CPU second of read-increment-write over ``keys`` twice."""
    path = root / layout
    store = legacy_store(path) if layout == "legacy" else parted_store(path) \
        if layout == "parted" else TaskStore(path, KeyHash.XXHASH64)
    try:
        started = time.process_time()  # the process's CPU (RocksDB's threads included):
        for _ in range(2):               # steadier than wall time beside other work
            for start in range(0, len(keys), BATCH):
                for k in keys[start:start + BATCH]:
                    store.set(k, "n", store.get(k, "n", 0) + 1)
                store.commit()
        took = time.process_time() - started
        assert store.get(keys[0], "n") == 2
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)
    return 2 * len(keys) / took


# the work of one run through a checkout's own ``TaskStore(path)`` (any release has it):
# one_run's loop again, as text, since it runs in a process importing the other checkout
_RELEASE_RUN = """
import random, shutil, sys, tempfile, time
from pathlib import Path
from worker.state.store import TaskStore
count, batch = int(sys.argv[1]), int(sys.argv[2])
keys = [f"user-{i}".encode() for i in range(count)]
random.Random(52).shuffle(keys)
root = Path(tempfile.mkdtemp(prefix="coxswain-bench-ops-"))
try:
    store = TaskStore(root / "store")
    started = time.process_time()
    for _ in range(2):
        for start in range(0, len(keys), batch):
            for k in keys[start:start + batch]:
                store.set(k, "n", store.get(k, "n", 0) + 1)
            store.commit()
    took = time.process_time() - started
    assert store.get(keys[0], "n") == 2
    store.close()
finally:
    shutil.rmtree(root, ignore_errors=True)
print(2 * len(keys) / took)
"""


def release_run(tree: Path, keys: int) -> float:
    """Records per CPU second of one run through ``tree``'s ``TaskStore``."""
    done = subprocess.run([sys.executable, "-c", _RELEASE_RUN, str(keys), str(BATCH)],
                          env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree,
                          check=True, capture_output=True, text=True)
    return float(done.stdout.split()[-1])


def against(tree: Path, keys: int, runs: int) -> None:
    """This checkout's ``TaskStore`` against ``tree``'s, alternated."""
    here = Path(__file__).resolve().parent.parent
    rates: dict[Path, list[float]] = {tree: [], here: []}
    print(f"load average {os.getloadavg()[0]:.2f}; {keys} keys in random order, two "
          f"passes, medians of {runs}; {tree} against this checkout ({here})")
    for i in range(runs):
        for side in (tree, here) if i % 2 == 0 else (here, tree):
            rates[side].append(release_run(side, keys))
        print(f"run {i + 1}: {tree.name} {rates[tree][-1]:,.0f} rec/s, this checkout "
              f"{rates[here][-1]:,.0f} rec/s", flush=True)
    then, now = statistics.median(rates[tree]), statistics.median(rates[here])
    print(f"\n| store | records/s (median) | ratio |\n|---|---|---|\n"
          f"| {tree.name} | {then:,.0f} | 1.00 |\n| this checkout | {now:,.0f} | "
          f"{now / then:.2f} |")
    print(f"load average {os.getloadavg()[0]:.2f} at end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--order", choices=("sequential", "random"), default="random",
                        help="the keys' order in each pass (a real input's is random; "
                        "sequential ids sort together in the legacy layout)")
    parser.add_argument("--against", type=Path, metavar="TREE",
                        help="compare with the TaskStore of the checkout at TREE instead")
    args = parser.parse_args()
    if args.against is not None:
        against(args.against.resolve(), args.keys, args.runs)
        return
    keys = [f"user-{i}".encode() for i in range(args.keys)]
    if args.order == "random":
        random.Random(52).shuffle(keys)
    root = Path(tempfile.mkdtemp(prefix="coxswain-bench-ops-"))
    rates: dict[str, list[float]] = {"legacy": [], "bucket": [], "parted": []}
    print(f"load average {os.getloadavg()[0]:.2f}; {args.keys} keys in {args.order} order, "
          f"two passes, medians of {args.runs}")
    try:
        for i in range(args.runs):
            order = ("legacy", "bucket", "parted")
            for layout in order if i % 2 == 0 else order[::-1]:
                rates[layout].append(one_run(layout, keys, root))
            print(f"run {i + 1}: legacy {rates['legacy'][-1]:,.0f} rec/s, bucket-ordered "
                  f"{rates['bucket'][-1]:,.0f} rec/s, two parts {rates['parted'][-1]:,.0f} "
                  "rec/s", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    legacy, bucket, parted = (statistics.median(rates[k])
                              for k in ("legacy", "bucket", "parted"))
    print(f"\n| layout | records/s (median) | x legacy |\n|---|---|---|\n"
          f"| legacy | {legacy:,.0f} | 1.00 |\n| bucket-ordered | {bucket:,.0f} | "
          f"{bucket / legacy:.2f} |\n| bucket-ordered, two parts (a merged task) | "
          f"{parted:,.0f} | {parted / legacy:.2f} ({parted / bucket:.2f} x one instance) |")
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
