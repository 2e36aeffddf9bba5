"""Kinesis shards as partitions, and their lineage.

A shard is a partition whose number is the one in its id (``shardId-000000000007`` is
partition 7): Kinesis numbers shards in creation order and never reuses a number, so a
reshard adds partitions and the job model's SSPs stay what they were. Unlike a Kafka
partition, a shard ends: a split or a merge closes its parents (they get an ending
sequence number) and opens children whose records follow theirs, key by key. The lineage
(each shard's parents, hash-key range and sequence range) travels in the job model's
config under ``shards``, so every processor and the coordinator judge it alike.

A parent's key space is finished when its checkpoint is past its ending sequence number:
the worker that reads a shard to its end commits ``endingSequenceNumber + 1`` for each of
its key buckets (:attr:`Shard.end_offset`), records or not. Sequence numbers are decimal
strings of up to 128 digits, Python ints here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SHARD_ID_PREFIX = "shardId-"
#: job model config key of the lineage: {"system.stream": {"partition": shard JSON}}
CONFIG_KEY = "shards"
MAX_HASH_KEY = 2**128 - 1


class ShardFormatError(ValueError):
    """A shard description that cannot be right."""


def hash_key(partition_key: bytes) -> int:
    """Kinesis's hash key of a partition key: the MD5 of its bytes (the UTF-8 of the
    string a producer gave) as an unsigned 128-bit big-endian integer. The open shard
    whose hash-key range holds it takes the record (unless the producer gave an
    ``ExplicitHashKey``, which no consumer sees), and so does state after a reshard."""
    return int.from_bytes(hashlib.md5(partition_key, usedforsecurity=False).digest(), "big")


def shard_partition(shard_id: str) -> int:
    """The partition of ``shard_id`` (``shardId-000000000007`` -> 7)."""
    number = shard_id.removeprefix(SHARD_ID_PREFIX)
    if number == shard_id or not number.isascii() or not number.isdigit() or len(number) > 18:
        raise ShardFormatError(f"not a Kinesis shard id: {shard_id!r}")
    return int(number)


def shard_id(partition: int) -> str:
    """The Kinesis shard id of ``partition``."""
    return f"{SHARD_ID_PREFIX}{partition:012d}"


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard as ListShards describes it."""

    partition: int
    parents: tuple[int, ...]  # none (an original shard), one (a split) or two (a merge)
    hash_key_range: tuple[int, int]  # inclusive, as Kinesis gives it
    starting_sequence: int
    ending_sequence: int | None = None  # set once a reshard closed the shard

    @property
    def closed(self) -> bool:
        """True once the shard takes no more records."""
        return self.ending_sequence is not None

    @property
    def end_offset(self) -> int | None:
        """The offset a key space of this shard commits once read to the end."""
        return None if self.ending_sequence is None else self.ending_sequence + 1


def _number(raw: object, what: str) -> int:
    if not isinstance(raw, str) or not raw.isascii() or not raw.isdigit() or len(raw) > 128:
        raise ShardFormatError(f"{what} must be a decimal string of at most 128 digits, "
                               f"got {raw!r}")
    return int(raw)


def shard_from_listing(item: Mapping[str, Any]) -> Shard:
    """A shard from one entry of ListShards' ``Shards`` (boto3's shape)."""
    parents = tuple(shard_partition(str(item[k]))
                    for k in ("ParentShardId", "AdjacentParentShardId") if item.get(k))
    hashes, sequences = item.get("HashKeyRange") or {}, item.get("SequenceNumberRange") or {}
    low = _number(hashes.get("StartingHashKey"), "StartingHashKey")
    high = _number(hashes.get("EndingHashKey"), "EndingHashKey")
    if not low <= high <= MAX_HASH_KEY:
        raise ShardFormatError(f"hash key range {low}..{high} is not within 0..2^128-1")
    ending = sequences.get("EndingSequenceNumber")
    return Shard(shard_partition(str(item.get("ShardId"))), tuple(sorted(parents)),
                 (low, high), _number(sequences.get("StartingSequenceNumber"),
                                      "StartingSequenceNumber"),
                 None if ending is None else _number(ending, "EndingSequenceNumber"))


def shards_from_listing(items: Iterable[Mapping[str, Any]]) -> dict[int, Shard]:
    """Every shard of a ListShards answer (all pages), by partition."""
    shards = {s.partition: s for s in map(shard_from_listing, items)}
    return dict(sorted(shards.items()))


def shard_to_json(shard: Shard) -> dict[str, Any]:
    """The job model config's form of a shard (numbers as decimal strings)."""
    return {"shardId": shard_id(shard.partition),
            "parents": list(shard.parents),
            "hashKeyRange": [str(shard.hash_key_range[0]), str(shard.hash_key_range[1])],
            "startingSequenceNumber": str(shard.starting_sequence),
            "endingSequenceNumber": None if shard.ending_sequence is None
            else str(shard.ending_sequence)}


def shard_from_json(partition: int, obj: Mapping[str, Any]) -> Shard:
    """The inverse of :func:`shard_to_json`."""
    low, high = obj["hashKeyRange"]
    ending = obj.get("endingSequenceNumber")
    return Shard(partition, tuple(int(p) for p in obj.get("parents", ())),
                 (_number(low, "hashKeyRange"), _number(high, "hashKeyRange")),
                 _number(obj["startingSequenceNumber"], "startingSequenceNumber"),
                 None if ending is None else _number(ending, "endingSequenceNumber"))


Lineage = Mapping[tuple[str, str], Mapping[int, Shard]]


def lineage_to_config(lineage: Lineage) -> dict[str, dict[str, Any]]:
    """``{"system.stream": {"partition": shard JSON}}`` for the job model's config."""
    return {f"{system}.{stream}": {str(p): shard_to_json(s) for p, s in sorted(shards.items())}
            for (system, stream), shards in sorted(lineage.items())}


def lineage_of_config(config: Mapping[str, Any]) -> dict[tuple[str, str], dict[int, Shard]]:
    """The lineage a job model's config holds (none for a job without shard inputs)."""
    out: dict[tuple[str, str], dict[int, Shard]] = {}
    for name, shards in (config.get(CONFIG_KEY) or {}).items():
        system, _, stream = str(name).partition(".")
        out[(system, stream)] = {int(p): shard_from_json(int(p), s) for p, s in shards.items()}
    return out
