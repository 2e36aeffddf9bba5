"""The partitioners producers use, in pure Python, for the key hash's independence tests
(``tests/grouping/test_key_hash_independence.py``); each is checked against the real
client in ``tests/worker/test_key_hash_partitioners.py`` (confluent-kafka's librdkafka
partitioners on a real broker)."""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable

Partitioner = Callable[[bytes, int], int]


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (the Java client's ``Utils.murmur2``), as a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


def java_default(key: bytes, partitions: int) -> int:
    """Kafka's Java producer (and librdkafka's ``murmur2``): positive murmur2 mod P."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def fnv1a(key: bytes, partitions: int) -> int:
    """librdkafka's ``fnv1a`` partitioner: 32-bit FNV-1a, as a signed int, abs mod P."""
    h = 0x811C9DC5
    for b in key:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return abs(signed) % partitions


def crc32(key: bytes, partitions: int) -> int:
    """librdkafka's ``consistent`` (and ``consistent_random``, the default) partitioner."""
    return zlib.crc32(key) % partitions


def kinesis(key: bytes, shards: int) -> int:
    """Kinesis: the MD5 of the partition key as a 128-bit hash key, in one of ``shards``
    even hash-key ranges (a stream created with that many shards)."""
    hash_key = int.from_bytes(hashlib.md5(key).digest(), "big")
    return hash_key * shards >> 128


PARTITIONERS: dict[str, Partitioner] = {
    "librdkafka-crc32": crc32, "kafka-java-murmur2": java_default,
    "librdkafka-fnv1a": fnv1a, "kinesis-md5": kinesis}
