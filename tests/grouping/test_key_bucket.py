"""The key-bucket function: each key hash's definition (zlib's CRC-32, XXH64 seed 42),
splits and merges, uniform."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from grouping.errors import InvalidElasticityFactor
from grouping.key_bucket import (
    contains,
    is_power_of_two,
    key_bucket,
    overlaps,
    parent_bucket,
    split_buckets,
    sub_buckets,
    validate_elasticity_factor,
)
from grouping.key_hash import KeyHash, UnknownKeyHash, key_hash_of, parse_key_hash

FACTORS = [1, 2, 4, 8, 16, 32, 64]
factor_st = st.sampled_from(FACTORS)


hash_st = st.sampled_from(list(KeyHash))


@given(st.binary(max_size=64), factor_st)
def test_legacy_bucket_is_unsigned_crc32_mod_factor(key: bytes, factor: int) -> None:
    assert key_bucket(key, 0, factor, KeyHash.CRC32) == zlib.crc32(key) % factor


@given(st.binary(max_size=64), factor_st)
def test_bucket_is_xxh64_seed_42_mod_factor(key: bytes, factor: int) -> None:
    assert key_bucket(key, 0, factor, KeyHash.XXHASH64) == \
        xxhash.xxh64_intdigest(key, 42) % factor


def test_known_vectors_match_spark_sql() -> None:
    # Spark SQL: SELECT crc32('hello') = 907060870, crc32('') = 0,
    # xxhash64(CAST('hello' AS BINARY)) = -4367754540140381902 (signed)
    assert key_bucket(b"hello", 0, 64, KeyHash.CRC32) == 907060870 % 64
    assert key_bucket(b"", 0, 8, KeyHash.CRC32) == 0
    assert key_bucket(b"hello", 0, 64, KeyHash.XXHASH64) == \
        (-4367754540140381902 & (2**64 - 1)) % 64


def test_a_model_without_key_hash_is_crc32_and_names_are_checked() -> None:
    assert key_hash_of({}) is KeyHash.CRC32
    assert key_hash_of({"keyHash": "xxhash64"}) is KeyHash.XXHASH64
    with pytest.raises(UnknownKeyHash, match="use one of xxhash64, crc32"):
        parse_key_hash("murmur3")


@given(st.integers(min_value=0, max_value=2**62), factor_st, hash_st)
def test_null_key_uses_offset_mod_factor(offset: int, factor: int, kh: KeyHash) -> None:
    assert key_bucket(None, offset, factor, kh) == offset % factor


@given(st.one_of(st.none(), st.binary(max_size=32)), st.integers(0, 2**40),
       st.sampled_from(FACTORS[:-1]), hash_st)
def test_bucket_under_2f_is_one_of_the_split_buckets(
    key: bytes | None, offset: int, factor: int, kh: KeyHash
) -> None:
    b = key_bucket(key, offset, factor, kh)
    assert key_bucket(key, offset, 2 * factor, kh) in split_buckets(b, factor)
    assert parent_bucket(key_bucket(key, offset, 2 * factor, kh), 2 * factor) == b


@given(st.integers(0, 63), factor_st, factor_st)
def test_containment_agrees_with_sub_buckets(bucket: int, f1: int, f2: int) -> None:
    outer_f, inner_f = min(f1, f2), max(f1, f2)
    outer = bucket % outer_f
    inside = set(sub_buckets(outer, outer_f, inner_f))
    for b in range(inner_f):
        assert contains(outer, outer_f, b, inner_f) == (b in inside)
        assert overlaps(outer, outer_f, b, inner_f) == (b in inside)


def _realistic_keys(n: int) -> list[bytes]:
    rng = random.Random(20261122)
    kinds: list[Callable[[int], bytes]] = [
        lambda i: f"user-{i}".encode(),
        lambda i: f"order:{rng.randrange(10**9):09d}".encode(),
        lambda i: f"{rng.getrandbits(128):032x}".encode(),  # uuid-like hex
        lambda i: f"customer_{i}@example.com".encode(),
        lambda i: i.to_bytes(8, "big"),  # binary long keys
    ]
    # Each kind numbers its own keys 0, 1, 2, ... as an id space does. (CRC-32 is affine in
    # the key bits, so an artificial stride such as "every 5th id" can skew the low bits.)
    keys = [kinds[i % len(kinds)](i // len(kinds)) for i in range(n)]
    assert len(set(keys)) == n  # chi-square needs distinct keys, not repeats
    return keys


@pytest.mark.parametrize("kh", list(KeyHash))
@pytest.mark.parametrize("factor", [2, 4, 8, 16, 32, 64])
def test_buckets_are_uniform_for_100k_realistic_keys(factor: int, kh: KeyHash) -> None:
    keys = _realistic_keys(100_000)
    counts = [0] * factor
    for k in keys:
        counts[key_bucket(k, 0, factor, kh)] += 1
    expected = len(keys) / factor
    chi2 = sum((c - expected) ** 2 / expected for c in counts)
    # Critical value of chi-square at p = 0.001 with factor-1 degrees of freedom
    # (Wilson-Hilferty approximation), so a uniform hash fails 1 run in 1000.
    df = factor - 1
    z = 3.09
    critical = df * (1 - 2 / (9 * df) + z * (2 / (9 * df)) ** 0.5) ** 3
    assert chi2 < critical, (chi2, critical, counts)


@pytest.mark.parametrize("bad", [0, 3, 6, 12, 128, -2, 1.0, "4", True, None])
def test_invalid_elasticity_factors_are_refused(bad: object) -> None:
    with pytest.raises(InvalidElasticityFactor, match="elasticity factor"):
        validate_elasticity_factor(bad)


def test_max_factor_is_configurable() -> None:
    assert validate_elasticity_factor(128, max_factor=256) == 128
    assert [f for f in range(1, 70) if is_power_of_two(f)] == FACTORS
