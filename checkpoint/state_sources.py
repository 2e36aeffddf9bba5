"""Which snapshots a task's state is made of, across elasticity changes (pure).

State is stored per record key, so the state of key bucket b under factor F is exactly
the entries whose record key k has ``key_bucket(k, F) == b``. Cut the task's key space
into *cells*: its buckets under the finest factor any relevant checkpoint used (Fmax).
Each cell's state is in the snapshot of the task that committed it last; since a key
space moves between tasks only through a new job model version (the old owner's last
commit before the barrier, the new owner's first after it), "last" is the highest job
model version among the checkpoints whose key space holds the cell. So:

* the steady case: the task's own last checkpoint holds every cell: one source, no
  filtering;
* a split (F -> 2F): child bucket c's one cell is held by the parent's checkpoint only:
  restore the parent's snapshot keeping the keys of bucket c under 2F;
* a merge (2F -> F): each child's cell comes from that child's snapshot (its version is
  higher than the old parent's): the union, disjoint by construction;
* several steps at once, or buckets merged at different points, compose: each cell from
  its own latest holder, filtered by bucket under Fmax.

A cell no checkpoint holds has no state yet (empty). Null record keys have no bucket:
a snapshot's null-key entries belong to the cell of its own bucket (on a split they go
to child b, not b + F; on a merge, of the children's, the lowest bucket's are kept).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from checkpoint.commit import EntryKey


@dataclass(frozen=True, slots=True)
class HeldState:
    """A task's last checkpoint with state: what it names and which key spaces it
    covers (``EntryKey``: system, stream, partition, factor, bucket)."""

    task_name: str
    checkpoint_id: str | None
    markers: Mapping[str, Mapping[str, str]]
    job_model_version: int
    key_spaces: tuple[EntryKey, ...]


@dataclass(frozen=True, slots=True)
class StateSource:
    """Restore ``task_name``'s snapshot keeping the keys whose bucket under ``factor`` is
    in ``buckets`` (and null keys when ``null_keys``)."""

    task_name: str
    checkpoint_id: str | None
    markers: Mapping[str, Mapping[str, str]]
    factor: int
    buckets: tuple[int, ...]
    null_keys: bool


def _factor_and_bucket(spaces: Sequence[EntryKey]) -> tuple[int, int]:
    factors = {s[3] for s in spaces}
    buckets = {s[4] for s in spaces}
    if len(factors) != 1 or len(buckets) != 1:
        raise ValueError(f"a task's key spaces share one factor and bucket, got {spaces}")
    return factors.pop(), buckets.pop()


def _covers(held: HeldState, task_partitions: set[tuple[str, str, int]],
            cell: int) -> bool:
    return any((s[0], s[1], s[2]) in task_partitions and cell % s[3] == s[4]
               for s in held.key_spaces)


def state_sources(task_spaces: Sequence[EntryKey], held: Iterable[HeldState]
                  ) -> tuple[StateSource, ...]:
    """The snapshots a task with key spaces ``task_spaces`` (one factor, one bucket)
    restores from; ``held``: the last checkpoint with state of every task that may
    share a key space with it (others are ignored). Empty: the task starts empty."""
    factor, bucket = _factor_and_bucket(task_spaces)
    partitions = {(s[0], s[1], s[2]) for s in task_spaces}
    relevant = [h for h in held if h.markers and any(
        (s[0], s[1], s[2]) in partitions
        and s[4] % min(factor, s[3]) == bucket % min(factor, s[3])
        for s in h.key_spaces)]
    if not relevant:
        return ()
    finest = max([factor, *(s[3] for h in relevant for s in h.key_spaces)])
    chosen: dict[int, HeldState] = {}
    for cell in range(bucket, finest, factor):  # this task's buckets under ``finest``
        holders = [h for h in relevant if _covers(h, partitions, cell)]
        if holders:
            chosen[cell] = max(holders, key=lambda h: (h.job_model_version,
                                                       h.checkpoint_id or ""))
    by_task: dict[str, list[int]] = {}
    for cell, h in sorted(chosen.items()):
        by_task.setdefault(h.task_name, []).append(cell)
    by_name = {h.task_name: h for h in chosen.values()}
    # null keys have no bucket: a snapshot's null-key entries belong to its own bucket's
    # cell; when several sources bring some, the lowest cell's win
    with_nulls = [cells[0] for name, cells in by_task.items()
                  if _factor_and_bucket(by_name[name].key_spaces)[1] in cells]
    null_cell = min(with_nulls) if with_nulls else None
    return tuple(
        StateSource(name, by_name[name].checkpoint_id, by_name[name].markers, finest,
                    tuple(cells), cells[0] == null_cell)
        for name, cells in sorted(by_task.items(), key=lambda kv: kv[1][0]))
