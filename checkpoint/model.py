"""Checkpoint value types.

* :class:`CheckpointV1`: input offsets per SSP(Kb) (Samza's original format).
* :class:`CheckpointV2`: adds a checkpoint id and state checkpoint markers per state
  backend and store (SAMZA-2591), so a restore can find the state snapshot that matches.
* Per-key-bucket entries (:class:`BucketKey` -> offset) are what the store keeps and what
  resolution works on: "every record of this partition whose key bucket under F is b, with
  offset < o, has been processed".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from checkpoint.errors import CheckpointFormatError
from grouping.model import SystemStreamPartition

_CHECKPOINT_ID = re.compile(r"^(\d+)-(\d+)$")


class ResetPolicy(StrEnum):
    """Where a key space with no checkpoint starts: the oldest or the newest record."""

    EARLIEST = "earliest"
    LATEST = "latest"


#: A start offset: a concrete next offset to read, or a reset policy the worker resolves
#: against the broker. Ordering: earliest < every offset < latest.
StartOffset = int | ResetPolicy


def offset_sort_key(offset: StartOffset) -> tuple[int, int]:
    """Sort key realising earliest < 0 < 1 < ... < latest."""
    if offset is ResetPolicy.EARLIEST:
        return (0, 0)
    if offset is ResetPolicy.LATEST:
        return (2, 0)
    assert isinstance(offset, int)
    return (1, offset)


#: Kafka offsets are int64; Kinesis sequence numbers are decimal strings of up to 128
#: digits. Offsets are Python ints everywhere and exact text in SQL, so both fit.
MAX_OFFSET_DIGITS = 128


def parse_offset(raw: object) -> int:
    """A committed offset: a decimal integer >= 0 of at most :data:`MAX_OFFSET_DIGITS`
    digits (given as int or string)."""
    if isinstance(raw, bool):
        raise CheckpointFormatError(f"offset must be a decimal integer, got {raw!r}")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and raw.isascii() and raw.isdigit():
        value = int(raw)
    else:
        raise CheckpointFormatError(f"offset must be a non-negative decimal integer, got {raw!r}")
    if value < 0:
        raise CheckpointFormatError(f"offset must be >= 0, got {value}")
    if value >= 10**MAX_OFFSET_DIGITS:
        raise CheckpointFormatError(f"offset of {len(str(value))} digits: at most "
                                    f"{MAX_OFFSET_DIGITS} (a Kinesis sequence number's)")
    return value


def parse_start_offset(raw: object) -> StartOffset:
    """A start offset: a decimal integer or ``earliest`` / ``latest``."""
    if isinstance(raw, str) and raw in (ResetPolicy.EARLIEST, ResetPolicy.LATEST):
        return ResetPolicy(raw)
    return parse_offset(raw)


@dataclass(frozen=True, order=True, slots=True)
class CheckpointId:
    """``{millis}-{nanoId}`` as in Samza; ordered by millis, then nano id."""

    millis: int
    nano_id: int

    def __str__(self) -> str:
        return f"{self.millis}-{self.nano_id}"

    @staticmethod
    def parse(raw: str) -> CheckpointId:
        """Read ``millis-nanoId``; raises CheckpointFormatError otherwise."""
        m = _CHECKPOINT_ID.match(raw.strip()) if isinstance(raw, str) else None
        if m is None:
            raise CheckpointFormatError(
                f"checkpoint id must look like '<millis>-<nanos>', got {raw!r}")
        return CheckpointId(int(m.group(1)), int(m.group(2)))

    @staticmethod
    def of(epoch_nanos: int) -> CheckpointId:
        """The id for a time given in nanoseconds since the epoch (no clock read here)."""
        return CheckpointId(epoch_nanos // 1_000_000, epoch_nanos % 1_000_000)


def _frozen(d: Mapping[SystemStreamPartition, str]) -> Mapping[SystemStreamPartition, str]:
    return MappingProxyType(dict(sorted(d.items())))


@dataclass(frozen=True, slots=True)
class CheckpointV1:
    """Input offsets (next offset to read) per SSP or SSPKb."""

    input_offsets: Mapping[SystemStreamPartition, str]
    version: int = field(default=1, init=False)

    @staticmethod
    def of(input_offsets: Mapping[SystemStreamPartition, str]) -> CheckpointV1:
        """Build with sorted, read-only offsets."""
        return CheckpointV1(_frozen(input_offsets))


@dataclass(frozen=True, slots=True)
class CheckpointV2:
    """Checkpoint id, input offsets, and state checkpoint markers (backend -> store -> marker)."""

    checkpoint_id: CheckpointId
    input_offsets: Mapping[SystemStreamPartition, str]
    state_checkpoint_markers: Mapping[str, Mapping[str, str]]
    version: int = field(default=2, init=False)

    @staticmethod
    def of(
        checkpoint_id: CheckpointId,
        input_offsets: Mapping[SystemStreamPartition, str],
        state_checkpoint_markers: Mapping[str, Mapping[str, str]] | None = None,
    ) -> CheckpointV2:
        """Build with sorted, read-only mappings."""
        markers = {
            backend: MappingProxyType(dict(sorted(stores.items())))
            for backend, stores in sorted((state_checkpoint_markers or {}).items())
        }
        return CheckpointV2(checkpoint_id, _frozen(input_offsets), MappingProxyType(markers))

    def to_v1(self) -> CheckpointV1:
        """The v1 view: input offsets only (what a v1 reader understands)."""
        return CheckpointV1(self.input_offsets)


Checkpoint = CheckpointV1 | CheckpointV2


def upgrade(checkpoint: Checkpoint, checkpoint_id: CheckpointId) -> CheckpointV2:
    """A v2 checkpoint holding the same offsets (no state markers for a v1 original)."""
    if isinstance(checkpoint, CheckpointV2):
        return checkpoint
    return CheckpointV2.of(checkpoint_id, checkpoint.input_offsets, {})


@dataclass(frozen=True, order=True, slots=True)
class BucketKey:
    """Key space (partition ``ssp``, factor, bucket): bucket ``bucket`` under factor ``factor``."""

    ssp: SystemStreamPartition  # whole partition: no key bucket
    factor: int
    bucket: int

    def __post_init__(self) -> None:
        if self.ssp.has_key_bucket:
            raise ValueError("a bucket key's SSP is the whole partition")
        if self.factor < 1 or self.factor & (self.factor - 1):
            raise ValueError(f"factor must be a power of two, got {self.factor}")
        if not 0 <= self.bucket < self.factor:
            raise ValueError(f"bucket must be within 0..{self.factor - 1}, got {self.bucket}")

    @staticmethod
    def of_ssp(ssp: SystemStreamPartition, factor: int) -> BucketKey:
        """The key space an SSP(Kb) of a task grouped with ``factor`` covers."""
        if not ssp.has_key_bucket:
            return BucketKey(ssp, 1, 0)
        return BucketKey(ssp.whole(), factor, ssp.key_bucket)


@dataclass(frozen=True, slots=True)
class SkipWatermark:
    """Records of sub-bucket (ssp, factor, bucket) with offset below ``offset`` are done."""

    ssp: SystemStreamPartition
    factor: int
    bucket: int
    offset: StartOffset


@dataclass(frozen=True, slots=True)
class SspStart:
    """Where one SSP(Kb) of a task starts, and which of its sub-buckets skip further."""

    ssp: SystemStreamPartition
    start: StartOffset
    skip_below: tuple[SkipWatermark, ...] = ()


@dataclass(frozen=True, slots=True)
class TaskCheckpointMeta:
    """The v2 part of a task's checkpoint: its id and state checkpoint markers."""

    checkpoint_id: str | None
    state_checkpoint_markers: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    job_model_version: int = 0  # of the commit that wrote it (as read from the store)
