"""The parts of a task's store, and which part owns a stored key.

A task's store is one RocksDB instance (its *root*) and, after a merge, other instances
beside it (folders ``part-1``, ``part-2``, ... inside the root's folder), each owning some
key ranges of the bucket-ordered layout: a merge links its second child's files as a
part instead of copying its entries, so it costs the same at 10 MB or 10 GB (rocksdict
exposes neither the ingestion of a database's own SST files nor column-family import,
the two ways RocksDB merges stores without rewriting them). The root owns every key no
part owns, and the store's own entries (its layout, this map). Parts own disjoint
ranges, so a key lives in exactly one instance, found by a bisect over the ranges'
starts. The map is kept in the root (``PARTS_KEY``), so a checkpoint of the root names
the parts checkpointed beside it.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from worker.state.keys import KeyRange

PART_PREFIX = "part-"


@dataclass(frozen=True, slots=True)
class Part:
    """One instance beside the root: its folder (under the root's) and its key ranges
    (sorted, disjoint)."""

    folder: str
    ranges: tuple[KeyRange, ...]


class PartMap:
    """Which instance owns a stored key: a part's index, or -1 for the root."""

    def __init__(self, parts: Sequence[Part] = ()) -> None:
        self.parts = tuple(parts)
        bounds = sorted((r.begin, r.end, i) for i, p in enumerate(self.parts)
                        for r in p.ranges)
        for (_, end, _), (begin, _, _) in pairwise(bounds):
            if begin < end:
                raise ValueError("a store's parts own overlapping key ranges")
        # the parts' ranges in key order, and each one's part
        self.begins = [b for b, _, _ in bounds]
        self.ends = [e for _, e, _ in bounds]
        self.owners = [i for _, _, i in bounds]

    def owner(self, stored: bytes) -> int:
        """The index of the part owning ``stored``, or -1 (the root)."""
        i = bisect.bisect_right(self.begins, stored) - 1
        if i >= 0 and stored < self.ends[i]:
            return self.owners[i]
        return -1

    def owned(self) -> list[KeyRange]:
        """Every range some part owns, sorted."""
        return [KeyRange(b, e) for b, e in zip(self.begins, self.ends, strict=True)]

    def to_json(self) -> bytes:
        """How the root stores the map."""
        return json.dumps([{"folder": p.folder,
                            "ranges": [[r.begin.hex(), r.end.hex()] for r in p.ranges]}
                           for p in self.parts]).encode()

    @staticmethod
    def of_json(raw: bytes | None) -> PartMap:
        """Inverse of :meth:`to_json` (None: no parts)."""
        if raw is None:
            return PartMap()
        return PartMap([Part(str(p["folder"]),
                             tuple(KeyRange(bytes.fromhex(b), bytes.fromhex(e))
                                   for b, e in p["ranges"]))
                        for p in json.loads(raw)])


def free_folder(taken: set[str]) -> str:
    """A part folder name not in ``taken``."""
    n = 1
    while f"{PART_PREFIX}{n}" in taken:
        n += 1
    return f"{PART_PREFIX}{n}"
