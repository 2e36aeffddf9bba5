"""How a state entry is stored: under its record key, so that the state of a key bucket is
exactly the entries whose record key falls in it (a split or merge filters on that).

An entry key is ``len(record key)`` (4 bytes, big endian; 0xFFFFFFFF for a null key) +
the record key + the entry name (UTF-8). Every entry of one record key shares the prefix
``len + key``, so they are contiguous in RocksDB's order and ``items(key)`` is one range
scan; the record key is recovered from any entry key without knowing its name.
"""

from __future__ import annotations

import struct

NULL_KEY = 0xFFFFFFFF
_LEN = struct.Struct(">I")
MAX_KEY_BYTES = 0xFFFFFFFE


def prefix(record_key: bytes | None) -> bytes:
    """The prefix shared by every entry of ``record_key``."""
    if record_key is None:
        return _LEN.pack(NULL_KEY)
    if len(record_key) > MAX_KEY_BYTES:
        raise ValueError("record keys are at most 4 GiB")
    return _LEN.pack(len(record_key)) + record_key


def entry_key(record_key: bytes | None, name: str) -> bytes:
    """The stored key of entry ``name`` of ``record_key``."""
    return prefix(record_key) + name.encode()


def split(stored: bytes) -> tuple[bytes | None, str]:
    """The record key and entry name of a stored key (inverse of :func:`entry_key`)."""
    if len(stored) < _LEN.size:
        raise ValueError(f"not an entry key: {stored!r}")
    (length,) = _LEN.unpack_from(stored)
    if length == NULL_KEY:
        return None, stored[_LEN.size:].decode()
    end = _LEN.size + length
    if end > len(stored):
        raise ValueError(f"not an entry key: {stored!r}")
    return stored[_LEN.size:end], stored[end:].decode()


def as_bytes(record_key: bytes | str | None) -> bytes | None:
    """Record keys as the input has them: bytes (Kafka), or str (encoded as UTF-8)."""
    if record_key is None or isinstance(record_key, bytes):
        return record_key
    return record_key.encode()
