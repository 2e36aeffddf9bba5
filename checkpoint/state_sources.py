"""Which snapshots a task's state is made of, across elasticity changes and reshards
(pure).

State is stored per record key, so the state of key bucket b under factor F is exactly
the entries whose record key k has ``key_bucket(k, F) == b``. Cut the task's key space
into *cells*: its buckets under the finest factor any relevant checkpoint used (Fmax).
Each cell's state is in the snapshot of the task whose checkpoint is furthest along for
it: the holder whose stored offset for the key space holding the cell is the largest, as
resolution's watermark for the cell is the largest such offset (``checkpoint.resolution``)
-- so the state restored and the offset started from are always one pair. Among holders
at that offset, the highest job model version wins (the new owner's checkpoint over its
predecessor's when nothing moved in between: the same state). In the flows the barrier
orders (the old owner's last commit before it, the new owner's first after it) the
furthest is also the latest; they differ only when a commit lands late, e.g. a paused
worker's whose fence check passed just before its tasks moved and whose write reached
the store after the new owners had started: its coarse entry may then be ahead of a
child's, and the start is its offset, so its snapshot must be the state. So:

* the steady case: the task's own last checkpoint holds every cell: one source, no
  filtering;
* a split (F -> 2F): child bucket c's one cell is held by the parent's checkpoint only:
  restore the parent's snapshot keeping the keys of bucket c under 2F;
* a merge (2F -> F): each child's cell comes from that child's snapshot (its version is
  higher than the old parent's): the union, disjoint by construction;
* several steps at once, or buckets merged at different points, compose: each cell from
  its own latest holder, filtered by bucket under Fmax.

**Reshards** (Kinesis): a child shard's records of a key follow every record of that key
in its parents (parents before children, ``checkpoint.shard_ends``), so a cell of a child
shard that no checkpoint of the child's own shard holds yet is held by the parents' final
snapshots: the entries whose partition key hashes (MD5, ``grouping.shards.hash_key``)
into the child's hash-key range. A split child keeps its half of its parent's; a merged
child both parents' whole. A parent that holds nothing for the cell is looked through to
its own parents (a shard that ended before its task ever committed). Factor changes
compose as above: the cells are under the finest factor of every checkpoint looked at.

A cell no checkpoint holds has no state yet (empty). Null record keys have no bucket and
no hash key: a snapshot's null-key entries belong to the cell of its own bucket (on a
split they go to child b, not b + F; on a merge, of the children's, the lowest bucket's
are kept), and across a reshard to the child shard whose range holds the parent's
starting hash key (of two merged parents, the lower one's are kept).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from checkpoint.commit import EntryKey
from grouping.shards import Lineage

Partition = tuple[str, str, int]  # system, stream, partition


@dataclass(frozen=True, slots=True)
class HeldState:
    """A task's last checkpoint with state: what it names and which key spaces it
    covers (``EntryKey``: system, stream, partition, factor, bucket)."""

    task_name: str
    checkpoint_id: str | None
    markers: Mapping[str, Mapping[str, str]]
    job_model_version: int
    key_spaces: tuple[EntryKey, ...]
    #: the stored offset of each key space (the entry this checkpoint is paired with);
    #: a key space left out ranks as unknown (-1)
    offsets: Mapping[EntryKey, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StateSource:
    """Restore ``task_name``'s snapshot keeping the keys whose bucket under ``factor`` is
    in ``buckets`` (and null keys when ``null_keys``); when ``hash_key_range`` is set
    (a reshard's parent), only the keys whose Kinesis hash key is within it (inclusive)."""

    task_name: str
    checkpoint_id: str | None
    markers: Mapping[str, Mapping[str, str]]
    factor: int
    buckets: tuple[int, ...]
    null_keys: bool
    hash_key_range: tuple[int, int] | None = None


def _factor_and_bucket(spaces: Sequence[EntryKey]) -> tuple[int, int]:
    factors = {s[3] for s in spaces}
    buckets = {s[4] for s in spaces}
    if len(factors) != 1 or len(buckets) != 1:
        raise ValueError(f"a task's key spaces share one factor and bucket, got {spaces}")
    return factors.pop(), buckets.pop()


def _partition(space: EntryKey) -> Partition:
    return space[0], space[1], space[2]


def _holding(held: HeldState, partitions: set[Partition], cell: int) -> list[EntryKey]:
    """The key spaces of ``held`` in ``partitions`` that hold ``cell``."""
    return [s for s in held.key_spaces if _partition(s) in partitions and cell % s[3] == s[4]]


def _furthest(holders: Iterable[HeldState], partitions: set[Partition], cell: int
              ) -> HeldState | None:
    """The holder of ``cell`` (of ``partitions``) whose stored offsets for it are the
    largest (resolution starts there), then the latest version."""
    found = [(h, spaces) for h in holders if (spaces := _holding(h, partitions, cell))]
    best: dict[Partition, int] = {}
    for h, spaces in found:
        for s in spaces:
            best[_partition(s)] = max(best.get(_partition(s), -1), h.offsets.get(s, -1))

    def rank(pair: tuple[HeldState, list[EntryKey]]) -> tuple[bool, int, str]:
        h, spaces = pair
        at_best = all(h.offsets.get(s, -1) == best[_partition(s)] for s in spaces)
        return at_best, h.job_model_version, h.checkpoint_id or ""

    picked = max(found, key=rank, default=None)
    return picked[0] if picked is not None else None


def ancestors(partitions: Iterable[Partition], lineage: Lineage | None
              ) -> dict[Partition, list[Partition]]:
    """Per shard partition of ``partitions``: its ancestors the lineage still lists,
    nearest first (parents, then theirs); partitions without parents are left out."""
    out: dict[Partition, list[Partition]] = {}
    for own in sorted(set(partitions)):
        shards = (lineage or {}).get((own[0], own[1]))
        if not shards or own[2] not in shards:
            continue
        seen: list[Partition] = []
        frontier = list(shards[own[2]].parents)
        while frontier:
            p = frontier.pop(0)
            if p in shards and (own[0], own[1], p) not in seen:
                seen.append((own[0], own[1], p))
                frontier.extend(shards[p].parents)
        if seen:
            out[own] = seen
    return out


@dataclass(frozen=True, slots=True)
class _Pick:
    """Who holds one cell: a holder, and the child range its keys are kept within."""

    held: HeldState
    child: Partition | None  # the task's own shard partition, for a parent's snapshot
    start_hash: int  # of the holder's shard, for the null keys of merged parents


def state_sources(task_spaces: Sequence[EntryKey], held: Iterable[HeldState],
                  lineage: Lineage | None = None) -> tuple[StateSource, ...]:
    """The snapshots a task with key spaces ``task_spaces`` (one factor, one bucket)
    restores from; ``held``: the last checkpoint with state of every task that may
    share a key space with it, or with an ancestor shard of one of its partitions
    (others are ignored); ``lineage``: the job model's shards (Kinesis inputs). Empty:
    the task starts empty."""
    factor, bucket = _factor_and_bucket(task_spaces)
    own = {_partition(s) for s in task_spaces}
    lines = ancestors(own, lineage)
    looked = own | {a for found in lines.values() for a in found}
    relevant = [h for h in held if h.markers and any(
        _partition(s) in looked
        and s[4] % min(factor, s[3]) == bucket % min(factor, s[3])
        for s in h.key_spaces)]
    if not relevant:
        return ()
    finest = max([factor, *(s[3] for h in relevant for s in h.key_spaces)])
    chosen: dict[int, list[_Pick]] = {}
    for cell in range(bucket, finest, factor):  # this task's buckets under ``finest``
        mine = _furthest(relevant, own, cell)
        if mine is not None:
            chosen[cell] = [_Pick(mine, None, -1)]
            continue
        picks: list[_Pick] = []
        for child, line in lines.items():
            picks += _from_ancestors(relevant, child, line, cell, lineage or {})
        if picks:
            chosen[cell] = picks
    return _grouped(chosen, finest, lineage or {})


def _from_ancestors(relevant: Sequence[HeldState], child: Partition,
                    line: Sequence[Partition], cell: int, lineage: Lineage
                    ) -> list[_Pick]:
    """The holders of ``cell`` for ``child``'s keys among its ancestors: each parent's
    final snapshot, or where a parent holds nothing, its own parents' (recursively)."""
    shards = lineage[(child[0], child[1])]
    picks: list[_Pick] = []
    frontier = [(child[0], child[1], p) for p in shards[child[2]].parents]
    visited: set[Partition] = set()
    while frontier:
        parent = frontier.pop(0)
        if parent in visited or parent not in line:
            continue  # expired from the lineage: nothing left of it
        visited.add(parent)
        holder = _furthest(relevant, {parent}, cell)
        if holder is not None:
            picks.append(_Pick(holder, child, shards[parent[2]].hash_key_range[0]))
        else:
            frontier += [(child[0], child[1], p) for p in shards[parent[2]].parents]
    return picks


def _grouped(chosen: Mapping[int, list[_Pick]], finest: int, lineage: Lineage
             ) -> tuple[StateSource, ...]:
    """One source per (holder, child range), its cells in order; null keys from one."""
    cells: dict[tuple[str, Partition | None], list[int]] = {}
    pick_of: dict[tuple[str, Partition | None], _Pick] = {}
    for cell, picks in sorted(chosen.items()):
        for pick in picks:
            key = (pick.held.task_name, pick.child)
            cells.setdefault(key, []).append(cell)
            pick_of[key] = pick
    # null keys have no bucket: a snapshot's null-key entries belong to its own bucket's
    # cell, and across a reshard to the child holding the parent's starting hash key;
    # when several sources bring some, the lowest cell's (then lowest range's) win
    eligible = []
    for key, found in cells.items():
        pick = pick_of[key]
        if _factor_and_bucket(pick.held.key_spaces)[1] not in found:
            continue
        if pick.child is not None:
            low, high = _range(pick.child, lineage)
            if not low <= pick.start_hash <= high:
                continue
        eligible.append((found[0], pick.start_hash, key))
    null_key = min(eligible)[2] if eligible else None
    out = []
    for key, found in sorted(cells.items(), key=lambda kv: (kv[1][0], kv[0][0],
                                                            kv[0][1] or ("", "", -1))):
        pick = pick_of[key]
        out.append(StateSource(
            pick.held.task_name, pick.held.checkpoint_id, pick.held.markers, finest,
            tuple(found), key == null_key,
            None if pick.child is None else _range(pick.child, lineage)))
    return tuple(out)


def _range(partition: Partition, lineage: Lineage) -> tuple[int, int]:
    return lineage[(partition[0], partition[1])][partition[2]].hash_key_range
