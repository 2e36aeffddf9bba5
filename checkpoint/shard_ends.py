"""Parents before children: which finished-ness a child shard's key space waits for.

Records of a key are in order within a shard, and a reshard moves the key to a child
shard: every record of the key in the parent must be processed before any in the child.
A child's key bucket ``b`` (under factor F) holds exactly the keys that were in bucket
``b`` of each parent, so it may start once bucket ``b`` of every parent is finished:
its resolved start (DESIGN.md's rule, across factor changes) is at or past the parent's
end offset (``endingSequenceNumber + 1``, what the worker that read the parent to its end
commits). Finer than waiting for whole parents, and exact: a fast bucket's keys move on
while a slow bucket's parent records are still being processed elsewhere.

A parent the lineage no longer lists (closed and expired after retention) holds nothing
left to read, so it is not waited for.
"""

from __future__ import annotations

from collections.abc import Callable

from checkpoint.model import StartOffset
from grouping.model import SystemStreamPartition
from grouping.shards import Lineage


def waiting_for(
    ssps: tuple[SystemStreamPartition, ...] | list[SystemStreamPartition],
    lineage: Lineage,
    start_of: Callable[[SystemStreamPartition], StartOffset],
) -> list[SystemStreamPartition]:
    """The parent key spaces (SSPs with the task's key bucket) that ``ssps`` still wait
    for: not yet finished. ``start_of`` resolves a key space's start from the checkpoints
    (a reset policy when it has none: unfinished)."""
    waiting: list[SystemStreamPartition] = []
    for ssp in ssps:
        shards = lineage.get((ssp.system, ssp.stream))
        shard = shards.get(ssp.partition) if shards else None
        if shards is None or shard is None:
            continue
        for parent in shard.parents:
            ended = shards.get(parent)
            if ended is None:
                continue  # expired: nothing left to read
            space = SystemStreamPartition(ssp.system, ssp.stream, parent, ssp.key_bucket)
            start = start_of(space)
            if ended.end_offset is None or not isinstance(start, int) \
                    or start < ended.end_offset:
                waiting.append(space)
    return waiting
