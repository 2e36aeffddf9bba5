"""A commit request, checked against the job model and turned into the rows it writes.

Pure and deliberately plain: a worker commits about a thousand key buckets at a time, many
times a second, so this works on tuples and dicts rather than rich objects. Each SSP(Kb) a
task reads maps to the key space its offset describes (``BucketKey`` as a tuple):
``(system, stream, partition, factor, bucket)``, factor 1 bucket 0 for a whole partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from checkpoint.errors import CheckpointError, CheckpointFormatError
from checkpoint.model import BucketKey, CheckpointId, TaskCheckpointMeta, parse_offset
from grouping.model import SystemStreamPartition, TaskModel

SspKey = tuple[str, str, int, int]
"""An SSP as it arrives: system, stream, partition, key bucket (-1: the whole partition)."""
EntryKey = tuple[str, str, int, int, int]
"""A key space: system, stream, partition, factor, bucket."""
EntryRow = tuple[str, str, int, int, int, int, str | None]
"""A key space, the next offset to read, and the checkpoint id of the commit (or None)."""
CommitIndex = Mapping[str, Mapping[SspKey, EntryKey]]
"""Per task name: the SSP(Kb)s it reads and the key space of each."""


def entry_key(ssp: SystemStreamPartition, factor: int) -> EntryKey:
    """The key space an SSP(Kb) of a task grouped with ``factor`` covers (as a tuple)."""
    k = BucketKey.of_ssp(ssp, factor)
    return (k.ssp.system, k.ssp.stream, k.ssp.partition, k.factor, k.bucket)


def bucket_key(key: EntryKey) -> BucketKey:
    """The ``BucketKey`` of an entry key."""
    system, stream, partition, factor, bucket = key
    return BucketKey(SystemStreamPartition(system, stream, partition), factor, bucket)


def commit_index(tasks: Iterable[TaskModel], factor: int) -> dict[str, dict[SspKey, EntryKey]]:
    """The index a commit is checked against; build it once per job model version."""
    return {
        t.name: {(s.system, s.stream, s.partition, s.key_bucket): entry_key(s, factor)
                 for s in t.ssps}
        for t in tasks
    }


TaskPosition = list[tuple[EntryKey, int]]
"""The offsets a task's checkpoint names, per key space."""


@dataclass(frozen=True, slots=True)
class CommitBatch:
    """What one commit writes: entry rows sorted by key (a fixed lock order for the
    database), the v2 metadata of the tasks that sent any, and the offsets that metadata
    belongs to (it is written only while those offsets are the stored ones)."""

    rows: list[EntryRow]
    task_meta: dict[str, TaskCheckpointMeta]
    positions: dict[str, TaskPosition]


def build_commit(checkpoints: Mapping[str, Mapping[str, Any]], index: CommitIndex) -> CommitBatch:
    """Check each task's checkpoint (wire form: ``inputOffsets`` of ``{ssp, offset}``,
    optional ``checkpointId`` and ``stateCheckpointMarkers``) and list the rows it writes.

    Raises ``CheckpointError`` when a task reads no such SSP, names one twice, or an offset
    or checkpoint id is malformed; the caller has already fenced unknown tasks.
    """
    rows: list[EntryRow] = []
    meta: dict[str, TaskCheckpointMeta] = {}
    positions: dict[str, TaskPosition] = {}
    for name, cp in checkpoints.items():
        allowed = index[name]
        raw_id = cp.get("checkpointId")
        checkpoint_id = None if raw_id is None else str(CheckpointId.parse(raw_id))
        seen: set[SspKey] = set()
        position: TaskPosition = []
        for entry in cp["inputOffsets"]:
            s = entry["ssp"]
            ssp_key = (s["system"], s["stream"], s["partition"], s.get("keyBucket", -1))
            key = allowed.get(ssp_key)
            if key is None:
                raise CheckpointError(f"task {name!r} does not read {_describe(ssp_key)}")
            if ssp_key in seen:
                raise CheckpointError(f"task {name!r}: {_describe(ssp_key)} appears twice")
            seen.add(ssp_key)
            try:
                offset = parse_offset(entry["offset"])
            except CheckpointFormatError as e:
                raise CheckpointFormatError(f"task {name!r}, {_describe(ssp_key)}: {e}") from e
            rows.append((*key, offset, checkpoint_id))
            position.append((key, offset))
        markers = cp.get("stateCheckpointMarkers")
        if checkpoint_id is not None or markers:
            if not position:
                # nothing to order it by: a snapshot without offsets could pair with any
                raise CheckpointError(f"task {name!r}: a checkpoint id or state checkpoint "
                                      "markers need the task's input offsets")
            meta[name] = TaskCheckpointMeta(checkpoint_id, markers or {})
            positions[name] = position
    rows.sort()
    return CommitBatch(rows, meta, positions)


def _describe(key: SspKey) -> str:
    return str(SystemStreamPartition(*key))
