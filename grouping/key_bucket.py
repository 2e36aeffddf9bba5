"""The key-bucket function (part of the wire contract) and elasticity-factor arithmetic.

A record's key bucket under elasticity factor F is ``h(key) mod F`` with the job's key
hash ``h`` (``grouping.key_hash``: ``xxhash64`` for new jobs, ``crc32`` for jobs made before
the choice existed); a record with a null key uses ``offset mod F``.
F is a power of two, so bucket b under F splits into b and b + F under 2F and merges back:
``bucket(x, 2F) mod F == bucket(x, F)`` for every record x.
"""

from __future__ import annotations

from grouping.errors import InvalidElasticityFactor
from grouping.key_hash import KeyHash, hasher

#: Largest elasticity factor accepted unless a deployment configures another maximum.
DEFAULT_MAX_ELASTICITY_FACTOR = 64


def is_power_of_two(n: int) -> bool:
    """True for 1, 2, 4, 8, ..."""
    return n >= 1 and (n & (n - 1)) == 0


def validate_elasticity_factor(
    factor: object, max_factor: int = DEFAULT_MAX_ELASTICITY_FACTOR
) -> int:
    """Return ``factor`` if it is a power of two within 1..max_factor, else raise.

    Raises:
        InvalidElasticityFactor: with a sentence saying what is wrong.
    """
    if not is_power_of_two(max_factor):
        raise InvalidElasticityFactor(
            f"maximum elasticity factor must be a power of two, got {max_factor}"
        )
    if isinstance(factor, bool) or not isinstance(factor, int):
        raise InvalidElasticityFactor(
            f"elasticity factor must be an integer, got {factor!r}"
        )
    if not is_power_of_two(factor) or factor > max_factor:
        raise InvalidElasticityFactor(
            f"elasticity factor must be a power of two within 1..{max_factor}, got {factor}"
        )
    return factor


def key_bucket(key: bytes | None, offset: int, factor: int, key_hash: KeyHash) -> int:
    """The key bucket of a record under elasticity ``factor`` (a power of two) and the
    job's ``key_hash``.

    ``key`` is the record key's bytes exactly as stored in the input (no deserialization);
    a null key falls back to the record's ``offset``.
    """
    if key is None:
        return offset & (factor - 1)
    return hasher(key_hash)(key) & (factor - 1)


def split_buckets(bucket: int, factor: int) -> tuple[int, int]:
    """The two buckets under ``2 * factor`` that bucket ``bucket`` under ``factor`` splits into."""
    return bucket, bucket + factor


def parent_bucket(bucket: int, factor: int) -> int:
    """The bucket under ``factor // 2`` that holds ``bucket`` under ``factor`` (factor >= 2)."""
    return bucket & ((factor >> 1) - 1)


def contains(outer_bucket: int, outer_factor: int, inner_bucket: int, inner_factor: int) -> bool:
    """True when key space (outer_bucket, outer_factor) contains (inner_bucket, inner_factor).

    Every record in the inner bucket is then in the outer bucket. Requires
    ``outer_factor <= inner_factor`` (both powers of two); a bucket contains itself.
    """
    return outer_factor <= inner_factor and (inner_bucket & (outer_factor - 1)) == outer_bucket


def overlaps(bucket_a: int, factor_a: int, bucket_b: int, factor_b: int) -> bool:
    """True when the two key spaces share records (one contains the other)."""
    if factor_a <= factor_b:
        return contains(bucket_a, factor_a, bucket_b, factor_b)
    return contains(bucket_b, factor_b, bucket_a, factor_a)


def sub_buckets(bucket: int, factor: int, finer_factor: int) -> range:
    """The buckets under ``finer_factor`` whose union is (bucket, factor)."""
    if finer_factor < factor:
        raise ValueError(f"finer factor {finer_factor} is smaller than {factor}")
    return range(bucket, finer_factor, factor)
