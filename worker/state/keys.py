"""How a state entry is stored: the layouts of a task's RocksDB keys.

Every entry of one record key shares a prefix, so they are contiguous in RocksDB's order
and ``items(key)`` is one range scan, and the record key is recovered from any entry key
without knowing its name. Two layouts exist:

* **bucket-ordered** (version 2, every store made since): ``0x01`` + the job's key hash
  of the record key, bit-reversed, as 8 big-endian bytes + ``len(record key)`` (4 bytes)
  + the record key + the entry name (UTF-8); a null key's entries are ``0x00`` + the
  name. A record's key bucket under factor F = 2^k is the hash's low k bits
  (``grouping.key_bucket``); reversed, they are the prefix's top k bits, so **a key
  bucket is one contiguous key range**, and bucket b's two halves under 2F (b and b + F)
  are its two half-ranges. A split keeps its half with RocksDB's range deletions on a
  hard-linked checkpoint: no entry is read or written, whatever the state's size.
* **legacy** (version 1, stores written before): ``len(record key)`` (4 bytes, big
  endian; 0xFFFFFFFF for a null key) + the record key + the name. A bucket is scattered
  over the whole key space; such a store keeps working as it is and is rewritten into
  the bucket-ordered layout the first time it is split or merged.

A bucket-ordered store names its layout and its key hash in one entry outside the
entries' key space (``META_KEY``), so a store is never read with another hash's ranges.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from grouping.key_bucket import is_power_of_two
from grouping.key_hash import KeyHash, hasher, parse_key_hash

NULL_KEY = 0xFFFFFFFF
_LEN = struct.Struct(">I")
MAX_KEY_BYTES = 0xFFFFFFFE

#: bucket-ordered tags: where null keys' entries live, and keyed entries
NULL_TAG, KEYED_TAG = b"\x00", b"\x01"
#: every entry of a bucket-ordered store lies in [ENTRIES_BEGIN, ENTRIES_END)
ENTRIES_BEGIN, ENTRIES_END = b"\x00", b"\x02"
#: the entry naming a bucket-ordered store's layout (never an entry key: tag 0xFF)
META_KEY = b"\xffcoxswain.layout"
#: the key ranges a split deleted whose files are not compacted yet (JSON, hex pairs)
DROPPED_KEY = b"\xffcoxswain.dropped"
#: the store's other parts and the key ranges each owns (``worker.state.parts``)
PARTS_KEY = b"\xffcoxswain.parts"
_HASH_BITS = 64

# each byte's bits in reverse order: h.to_bytes(8, "little").translate(this) is the
# 64-bit reversal of h, big endian
_REVERSED_BITS = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))


def _check(record_key: bytes) -> None:
    if len(record_key) > MAX_KEY_BYTES:
        raise ValueError("record keys are at most 4 GiB")


@dataclass(frozen=True, slots=True)
class KeyRange:
    """Stored keys ``begin <= k < end``."""

    begin: bytes
    end: bytes

    def __contains__(self, stored: object) -> bool:
        return isinstance(stored, bytes) and self.begin <= stored < self.end


class Layout(Protocol):
    """How one store encodes (record key, entry name) as a RocksDB key."""

    @property
    def version(self) -> int: ...

    def prefix(self, record_key: bytes | None) -> bytes: ...

    def entry_key(self, record_key: bytes | None, name: str) -> bytes: ...

    def split(self, stored: bytes) -> tuple[bytes | None, str]: ...


@dataclass(frozen=True, slots=True)
class LegacyLayout:
    """Version 1: ``len + key + name`` (see the module's doc)."""

    version: int = 1

    def prefix(self, record_key: bytes | None) -> bytes:
        """The prefix shared by every entry of ``record_key``."""
        if record_key is None:
            return _LEN.pack(NULL_KEY)
        _check(record_key)
        return _LEN.pack(len(record_key)) + record_key

    def entry_key(self, record_key: bytes | None, name: str) -> bytes:
        """The stored key of entry ``name`` of ``record_key``."""
        return self.prefix(record_key) + name.encode()

    def split(self, stored: bytes) -> tuple[bytes | None, str]:
        """The record key and entry name of a stored key (inverse of :meth:`entry_key`)."""
        if len(stored) < _LEN.size:
            raise ValueError(f"not an entry key: {stored!r}")
        (length,) = _LEN.unpack_from(stored)
        if length == NULL_KEY:
            return None, stored[_LEN.size:].decode()
        end = _LEN.size + length
        if end > len(stored):
            raise ValueError(f"not an entry key: {stored!r}")
        return stored[_LEN.size:end], stored[end:].decode()


@dataclass(frozen=True, slots=True)
class BucketLayout:
    """Version 2: entries ordered by the bit-reversed key hash (see the module's doc)."""

    key_hash: KeyHash
    version: int = 2
    # the hash function itself, looked up once: a prefix is computed for every read and
    # write of ``ctx.state`` (bench/state_ops.py)
    _hash: Callable[[bytes], int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hasher(self.key_hash))

    def prefix(self, record_key: bytes | None) -> bytes:
        """The prefix shared by every entry of ``record_key``."""
        if record_key is None:
            return NULL_TAG
        size = len(record_key)
        if size > MAX_KEY_BYTES:
            raise ValueError("record keys are at most 4 GiB")
        return b"".join((KEYED_TAG, self._hash(record_key).to_bytes(8, "little").translate(
            _REVERSED_BITS), _LEN.pack(size), record_key))

    def entry_key(self, record_key: bytes | None, name: str) -> bytes:
        """The stored key of entry ``name`` of ``record_key``."""
        return self.prefix(record_key) + name.encode()

    def split(self, stored: bytes) -> tuple[bytes | None, str]:
        """The record key and entry name of a stored key (inverse of :meth:`entry_key`)."""
        tag = stored[:1]
        if tag == NULL_TAG:
            return None, stored[1:].decode()
        head = 1 + 8 + _LEN.size
        if tag != KEYED_TAG or len(stored) < head:
            raise ValueError(f"not an entry key: {stored!r}")
        (length,) = _LEN.unpack_from(stored, 9)
        end = head + length
        if end > len(stored):
            raise ValueError(f"not an entry key: {stored!r}")
        return stored[head:end], stored[end:].decode()

    def meta(self) -> bytes:
        """The value of :data:`META_KEY` naming this layout."""
        return json.dumps({"version": self.version, "keyHash": self.key_hash.value},
                          sort_keys=True).encode()


def bucket_range(bucket: int, factor: int) -> KeyRange:
    """The stored keys of key bucket ``bucket`` under ``factor`` in the bucket-ordered
    layout (keyed entries only: a null key's bucket is its record's offset's)."""
    if not is_power_of_two(factor) or not 0 <= bucket < factor:
        raise ValueError(f"no bucket {bucket} under factor {factor}")
    bits = factor.bit_length() - 1
    top = int(f"{bucket:0{bits}b}"[::-1], 2) if bits else 0
    shift = _HASH_BITS - bits
    begin = KEYED_TAG + (top << shift).to_bytes(8, "big")
    upper = (top + 1) << shift
    end = ENTRIES_END if upper >> _HASH_BITS else KEYED_TAG + upper.to_bytes(8, "big")
    return KeyRange(begin, end)


def kept_ranges(buckets: set[int] | frozenset[int], factor: int, null_keys: bool
                ) -> list[KeyRange]:
    """The ranges a task keeps of a bucket-ordered store: its ``buckets`` under
    ``factor`` (and the null keys' entries when ``null_keys``), sorted and coalesced."""
    ranges = sorted((bucket_range(b, factor) for b in buckets), key=lambda r: r.begin)
    if null_keys:
        ranges.insert(0, KeyRange(NULL_TAG, KEYED_TAG))
    merged: list[KeyRange] = []
    for r in ranges:
        if merged and merged[-1].end >= r.begin:
            merged[-1] = KeyRange(merged[-1].begin, max(merged[-1].end, r.end))
        else:
            merged.append(r)
    return merged


def complement(kept: list[KeyRange]) -> list[KeyRange]:
    """The ranges of the entries' key space that ``kept`` (sorted, disjoint) leaves out:
    what a range deletion removes."""
    gaps: list[KeyRange] = []
    at = ENTRIES_BEGIN
    for r in kept:
        if r.begin > at:
            gaps.append(KeyRange(at, r.begin))
        at = max(at, r.end)
    if at < ENTRIES_END:
        gaps.append(KeyRange(at, ENTRIES_END))
    return gaps


def ranges_to_json(ranges: list[KeyRange], wait: int = 0) -> bytes:
    """How :data:`DROPPED_KEY` stores ranges, and how many batches to wait before
    compacting them."""
    return json.dumps({"wait": max(0, wait),
                       "ranges": [[r.begin.hex(), r.end.hex()] for r in ranges]}).encode()


def ranges_of_json(raw: bytes) -> tuple[list[KeyRange], int]:
    """Inverse of :func:`ranges_to_json`."""
    data = json.loads(raw)
    return ([KeyRange(bytes.fromhex(b), bytes.fromhex(e)) for b, e in data["ranges"]],
            int(data["wait"]))


def layout_of_meta(raw: bytes) -> BucketLayout:
    """The layout a :data:`META_KEY` value names.

    Raises:
        ValueError: an unknown version (a store written by a newer release)."""
    data = json.loads(raw)
    if data.get("version") != 2:
        raise ValueError(f"state store layout {data.get('version')!r} is unknown to this "
                         "release (written by a newer one?)")
    return BucketLayout(parse_key_hash(data["keyHash"]))


#: what stores written before the bucket-ordered layout use
LEGACY = LegacyLayout()


def as_bytes(record_key: bytes | str | None) -> bytes | None:
    """Record keys as the input has them: bytes (Kafka), or str (encoded as UTF-8)."""
    if record_key is None or isinstance(record_key, bytes):
        return record_key
    return record_key.encode()


def intersect(a: Sequence[KeyRange], b: Sequence[KeyRange]) -> list[KeyRange]:
    """The key ranges in both ``a`` and ``b`` (each sorted and disjoint), sorted."""
    out: list[KeyRange] = []
    i = j = 0
    while i < len(a) and j < len(b):
        begin, end = max(a[i].begin, b[j].begin), min(a[i].end, b[j].end)
        if begin < end:
            out.append(KeyRange(begin, end))
        if a[i].end <= b[j].end:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Sequence[KeyRange], b: Sequence[KeyRange]) -> list[KeyRange]:
    """The key ranges in ``a`` and not in ``b`` (each sorted and disjoint), sorted."""
    out: list[KeyRange] = []
    j = 0
    for r in a:
        at = r.begin
        while j < len(b) and b[j].end <= at:
            j += 1
        k = j
        while k < len(b) and b[k].begin < r.end:
            if b[k].begin > at:
                out.append(KeyRange(at, b[k].begin))
            at = max(at, b[k].end)
            k += 1
        if at < r.end:
            out.append(KeyRange(at, r.end))
    return out
