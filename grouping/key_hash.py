"""A job's key-hash function: the hash whose low bits name a record's key bucket (part of
the wire contract: the job model's ``config.keyHash``).

The bucket's hash must not be the hash the producer partitioned with (SEP-32): bucket
``h(key) mod F`` and partition ``h(key) mod P`` would share the hash's low bits, and with
P and F both even at least half of a partition's buckets would never see a record.
librdkafka's default partitioner (what a confluent-kafka producer uses unless told
otherwise) is CRC-32, so the first release's ``crc32`` is such a hash for every Python
producer. Two functions exist:

* ``xxhash64`` (the default for new jobs): XXH64 with seed 42 of the key's bytes, which is
  exactly Spark SQL's ``xxhash64(key)`` (its default seed), so the workers' filter runs in
  the JVM with no Python UDF. Independent of Kafka's Java partitioner (murmur2),
  librdkafka's (crc32, murmur2, fnv1a) and Kinesis's (MD5 hash-key ranges).
* ``crc32``: the unsigned CRC-32 of zlib and of Spark SQL's ``crc32``; the function of
  every job created before ``keyHash`` existed (a job model without ``keyHash`` means it).

The bucket is the hash's low bits (``hash & (F - 1)``), so bucket b under F splits into b
and b + F under 2F. Spark's ``pmod`` of the signed 64-bit ``xxhash64`` by a power of two
is those same low bits of its two's complement.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

import xxhash

from grouping.errors import GroupingError

#: the seed of Spark SQL's ``xxhash64`` (``XxHash64`` expression's default)
SPARK_XXHASH64_SEED = 42

#: the job model config's field
CONFIG_KEY = "keyHash"


class UnknownKeyHash(GroupingError):
    """A key-hash name that is not one of :class:`KeyHash`."""

    code = "unknown_key_hash"


class KeyHash(StrEnum):
    """The key-hash functions a job may use."""

    XXHASH64 = "xxhash64"
    CRC32 = "crc32"


#: what a new job gets unless configured otherwise
DEFAULT_KEY_HASH = KeyHash.XXHASH64
#: what a job whose models carry no ``keyHash`` uses (made before the field existed)
LEGACY_KEY_HASH = KeyHash.CRC32


def parse_key_hash(name: object) -> KeyHash:
    """The function named ``name``.

    Raises:
        UnknownKeyHash: with the names that exist.
    """
    try:
        return KeyHash(str(name))
    except ValueError:
        raise UnknownKeyHash(
            f"unknown key hash {name!r}: use one of {', '.join(k.value for k in KeyHash)}"
        ) from None


def key_hash_of(config: Mapping[str, Any]) -> KeyHash:
    """The key hash of a job model's config (``crc32`` when it carries none)."""
    found = config.get(CONFIG_KEY)
    return LEGACY_KEY_HASH if found is None else parse_key_hash(found)


def _xxhash64(key: bytes) -> int:
    return xxhash.xxh64_intdigest(key, SPARK_XXHASH64_SEED)


_FUNCTIONS: dict[KeyHash, Callable[[bytes], int]] = {
    KeyHash.XXHASH64: _xxhash64,
    KeyHash.CRC32: zlib.crc32,
}


def hasher(key_hash: KeyHash) -> Callable[[bytes], int]:
    """The function itself: key bytes -> an unsigned hash whose low bits are the bucket."""
    return _FUNCTIONS[key_hash]


def spark_sql(key_hash: KeyHash, column: str = "key") -> str:
    """Spark SQL computing the same hash of a binary ``column`` (signed for xxhash64; its
    low bits are the same)."""
    return f"{key_hash.value}({column})"
