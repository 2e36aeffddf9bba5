"""The key hash of new jobs (xxhash64) is independent of every common partitioner: for
each partitioner, partition count P and factor F, every (partition, bucket) gets records
and their counts pass a chi-square test, over 50 000 keys of each common shape. The
legacy crc32 is shown failing the same check against librdkafka's default partitioner
(the reason a new job does not use it)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable

import pytest

from grouping.key_bucket import key_bucket
from grouping.key_hash import KeyHash
from tests.grouping.partitioners import PARTITIONERS, Partitioner

N = 50_000
PARTITION_COUNTS = (2, 3, 4, 6, 8, 12)
FACTORS = (2, 4, 8, 16)


def _keys(shape: str) -> list[bytes]:
    rng = random.Random(f"{shape}-20261128")
    shapes: dict[str, Callable[[int], bytes]] = {
        "sequential": lambda i: str(i).encode(),
        "user-ids": lambda i: f"user-{i}".encode(),
        "uuids": lambda _: str(uuid.UUID(int=rng.getrandbits(128), version=4)).encode(),
        "stride-64": lambda i: str(1_000_000 + 64 * i).encode(),
        "binary-longs": lambda i: (i * 4096).to_bytes(8, "big"),
    }
    return [shapes[shape](i) for i in range(N)]


def _critical(df: int, z: float = 4.26) -> float:
    """Chi-square's critical value at p ~ 1e-5 (Wilson-Hilferty): the grid has about
    3 000 cells, so a uniform hash fails one of them about one run in 30."""
    return float(df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3)


def _spread(partitioner: Partitioner, keys: list[bytes], partitions: int,
            kh: KeyHash) -> dict[int, list[int]]:
    """partition -> records per bucket under the largest factor (smaller ones are sums)."""
    top = max(FACTORS)
    out = {p: [0] * top for p in range(partitions)}
    for k in keys:
        out[partitioner(k, partitions)][key_bucket(k, 0, top, kh)] += 1
    return out


def _failures(spread: dict[int, list[int]], factor: int) -> list[str]:
    top = len(next(iter(spread.values())))
    bad = []
    for p, fine in spread.items():
        counts = [sum(fine[b::factor]) for b in range(factor)]
        n = sum(counts)
        if n == 0:
            continue  # a partitioner that leaves a partition empty is not the hash's doing
        expected = n / factor
        chi2 = sum((c - expected) ** 2 / expected for c in counts)
        if 0 in counts or chi2 >= _critical(factor - 1):
            bad.append(f"P{len(spread)} F{factor} partition {p}: {counts}")
    assert top % factor == 0
    return bad


@pytest.mark.parametrize("shape", ["sequential", "user-ids", "uuids", "stride-64",
                                   "binary-longs"])
@pytest.mark.parametrize("partitioner", sorted(PARTITIONERS))
def test_xxhash64_buckets_are_independent_of_the_partitioner(partitioner: str,
                                                             shape: str) -> None:
    keys = _keys(shape)
    bad = []
    for p in PARTITION_COUNTS:
        spread = _spread(PARTITIONERS[partitioner], keys, p, KeyHash.XXHASH64)
        bad += [x for factor in FACTORS for x in _failures(spread, factor)]
    assert not bad, bad[:10]


def test_crc32_buckets_stay_empty_under_librdkafkas_default_partitioner() -> None:
    """The issue the new hash solves: P = 4, F = 4 leaves 12 of 16 tasks without a record."""
    spread = _spread(PARTITIONERS["librdkafka-crc32"], _keys("user-ids"), 4, KeyHash.CRC32)
    used = {(p, b) for p, fine in spread.items()
            for b in range(4) if sum(fine[b::4])}
    assert used == {(p, p) for p in range(4)}
