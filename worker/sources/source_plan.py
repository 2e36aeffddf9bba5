"""What a worker's one long-running query reads, from batch to batch: the partitions
(Kafka partitions or Kinesis shards) of its tasks and where each starts. The worker's
control loop writes it (atomically: a new file renamed over the old) whenever its
assignment changes; its Spark source reads it at every trigger, in its own process
(PySpark runs a streaming source's driver side in a Python process of its own), and
plans the next micro-batch from it. A handover is a batch boundary, not a new query.

A partition starts at ``start`` the first time a plan names it, and again whenever its
``generation`` changes (a task added on a partition whose position is already past the
task's start: the partition is read again from there, and the tasks that read it before
skip what they did). Otherwise the source goes on from where its last batch ended.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EARLIEST, LATEST = "earliest", "latest"


@dataclass(frozen=True, slots=True)
class PartitionStart:
    """Where a partition's reading starts, and when to (re)start there."""

    start: str  # "earliest", "latest", or the next offset (a decimal string)
    generation: int = 0
    ending: int | None = None  # a Kinesis shard's ending sequence number, once closed

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "generation": self.generation, "ending":
                None if self.ending is None else str(self.ending)}

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> PartitionStart:
        ending = obj.get("ending")
        return PartitionStart(str(obj["start"]), int(obj.get("generation", 0)),
                              None if ending is None else int(ending))


@dataclass(frozen=True, slots=True)
class SourcePlan:
    """Every partition the query reads, by key ``topic/partition`` (Kafka) or the shard's
    partition number as text (Kinesis); ``version`` grows with every change of them.
    ``max_records``: the most records the next batch reads in all (the worker's steered
    batch size, ``worker.batch_size``; Kafka), under the source's own limit."""

    version: int = 0
    partitions: Mapping[str, PartitionStart] = field(default_factory=dict)
    max_records: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "maxRecords": self.max_records,
                "partitions": {k: p.to_json() for k, p in sorted(self.partitions.items())}}

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> SourcePlan:
        most = obj.get("maxRecords")
        return SourcePlan(int(obj["version"]), {
            str(k): PartitionStart.from_json(v) for k, v in obj["partitions"].items()},
            None if most is None else int(most))


def partition_key(topic: str, partition: int) -> str:
    """A Kafka partition's key in a plan and in the source's offsets."""
    return f"{topic}/{partition}"


def split_key(key: str) -> tuple[str, int]:
    """The inverse of :func:`partition_key`."""
    topic, _, partition = key.rpartition("/")
    return topic, int(partition)


def write_plan(path: Path, plan: SourcePlan) -> None:
    """Replace the plan at ``path`` atomically (a reader sees the old or the new)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(plan.to_json()))
    os.replace(tmp, path)


def read_plan(path: Path) -> SourcePlan:
    """The plan at ``path`` (an empty one before the first is written)."""
    try:
        return SourcePlan.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return SourcePlan()
