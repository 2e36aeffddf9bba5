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

A merged task's store is composed the same way: its first child's snapshot linked as
the root, cut, and each other child's linked in a folder of its own inside it, recorded
in a second file (:func:`record_parts`) as the parts (``worker.state.parts``) owning the
ranges it keeps; ``TaskStore`` makes them its parts when first opened. A store whose
parts are still recorded here is not a store to cut unopened (its parts would be left
out): ``compose`` opens it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from worker.state.keys import KeyRange, ranges_of_json, ranges_to_json
from worker.state.parts import Part, PartMap

#: the file, in a store's root folder (beside RocksDB's own)
CUT_FILE = "COXSWAIN-PENDING-CUT"
#: the parts recorded, in the root's folder
PARTS_FILE = "COXSWAIN-PENDING-PARTS"


def _write(folder: Path, name: str, raw: bytes) -> None:
    """``raw`` as the file ``name`` in ``folder``, whole or not at all."""
    staging = folder / (name + ".partial")
    staging.write_bytes(raw)
    os.replace(staging, folder / name)


def _read(folder: Path, name: str) -> bytes | None:
    try:
        return (folder / name).read_bytes()
    except FileNotFoundError:
        return None


def record(folder: Path, kept: Sequence[KeyRange]) -> None:
    """Record that the store at ``folder`` keeps only ``kept`` (sorted, disjoint)."""
    _write(folder, CUT_FILE, ranges_to_json(list(kept)))


def pending(folder: Path) -> list[KeyRange] | None:
    """The ranges the store at ``folder`` keeps once its recorded cut is applied; None
    when it has none."""
    raw = _read(folder, CUT_FILE)
    return None if raw is None else ranges_of_json(raw)[0]


def applied(folder: Path) -> None:
    """The store applied its recorded cut (a crash before this applies it again, which
    deletes nothing more)."""
    (folder / CUT_FILE).unlink(missing_ok=True)


def record_parts(folder: Path, parts: Sequence[Part]) -> None:
    """Record that the folders of ``parts`` inside ``folder`` (each a bucket-ordered
    store of one instance) are parts of the store at ``folder``, owning their ranges
    (disjoint, and from which every other range is to be deleted in the part)."""
    _write(folder, PARTS_FILE, PartMap(parts).to_json())


def pending_parts(folder: Path) -> list[Part] | None:
    """The parts the store at ``folder`` records and has not made its own yet; None
    when it records none."""
    raw = _read(folder, PARTS_FILE)
    return None if raw is None else list(PartMap.of_json(raw).parts)


def parts_applied(folder: Path) -> None:
    """The store made its recorded parts its own (a crash before this makes them so
    again: the same map, and range deletions that delete nothing more)."""
    (folder / PARTS_FILE).unlink(missing_ok=True)
