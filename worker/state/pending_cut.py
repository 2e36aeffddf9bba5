"""A cut recorded beside a store's files and applied when the store is next opened.

A split child's store is its parent's snapshot, hard-linked, less the key ranges the
child does not keep. Opening RocksDB to delete those ranges, then checkpointing the
result, is most of what a split costs on the parent's host, and it grows with the number
of files (~1 000 at 4 GB: ~50 ms a child, bench/RESULTS.md). So the composition links
the files and writes the ranges kept in this file beside them, in the live store and in
the child's first snapshot; ``TaskStore`` applies it (range deletions, no entry read)
the first time the store is opened, which the child's first batch does anyway, and
removes it. A snapshot carrying the file is uploaded with it, so a restore elsewhere
applies the same cut. RocksDB ignores a file it did not name.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from worker.state.keys import KeyRange, ranges_of_json, ranges_to_json

#: the file, in a store's root folder (beside RocksDB's own)
CUT_FILE = "COXSWAIN-PENDING-CUT"


def record(folder: Path, kept: Sequence[KeyRange]) -> None:
    """Record that the store at ``folder`` keeps only ``kept`` (sorted, disjoint)."""
    staging = folder / (CUT_FILE + ".partial")
    staging.write_bytes(ranges_to_json(list(kept)))
    os.replace(staging, folder / CUT_FILE)


def pending(folder: Path) -> list[KeyRange] | None:
    """The ranges the store at ``folder`` keeps once its recorded cut is applied; None
    when it has none."""
    try:
        raw = (folder / CUT_FILE).read_bytes()
    except FileNotFoundError:
        return None
    return ranges_of_json(raw)[0]


def applied(folder: Path) -> None:
    """The store applied its recorded cut (a crash before this applies it again, which
    deletes nothing more)."""
    (folder / CUT_FILE).unlink(missing_ok=True)
