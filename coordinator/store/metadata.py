"""The MetadataStore protocol: a small namespaced, versioned key-value store.

It holds processor and task locality, job models by version, barrier state and the desired
config. Every value carries a version that increases on each write, which makes
compare-and-set possible (the job-model version counter relies on it). Implementations: SQL
(embedded default, here), ZooKeeper and a Kafka coordinator stream (their own issues).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Versioned:
    """A stored value and its version (1 for the first write of a key)."""

    value: bytes
    version: int


@dataclass(frozen=True, slots=True)
class Fence:
    """A key that must still be at ``version`` when a compare-and-set commits, checked in
    the same atomic step: the leader's epoch, so that a deposed leader cannot publish."""

    namespace: str
    key: str
    version: int


class MetadataStore(Protocol):
    """Namespaced get, put, delete, list and compare-and-set; each call is atomic."""

    def get(self, namespace: str, key: str) -> Versioned | None:
        """The value of ``key``, or None."""
        ...

    def put(self, namespace: str, key: str, value: bytes) -> int:
        """Write ``value``; return the new version."""
        ...

    def put_many(self, namespace: str, values: Mapping[str, bytes]) -> None:
        """Write several keys of one namespace in one transaction."""
        ...

    def delete(self, namespace: str, key: str) -> bool:
        """Remove ``key``; True if it existed."""
        ...

    def keys(self, namespace: str) -> list[str]:
        """The keys of ``namespace``, sorted (without reading the values)."""
        ...

    def list(self, namespace: str) -> dict[str, Versioned]:
        """Every key of ``namespace`` with its value."""
        ...

    def compare_and_set(
        self, namespace: str, key: str, value: bytes, expected_version: int | None,
        fence: Fence | None = None,
    ) -> int | None:
        """Write ``value`` only if the key's version is ``expected_version`` (None: the key
        must not exist) and ``fence`` (if given) still holds. Returns the new version, or
        None when a check failed."""
        ...

    def compare_and_set_many(
        self, namespace: str, writes: Mapping[str, tuple[bytes, int]],
    ) -> dict[str, int | None]:
        """Several compare-and-sets of existing keys (key -> (value, expected version)),
        each judged on its own, as :meth:`compare_and_set` would without a fence: key ->
        its new version, or None where refused (the key moved on or is gone). Not atomic
        as a whole; a store sends them in as few round trips as it can (a leader's lease
        renewals: two hundred a second at 1000 processors)."""
        ...

    def watch(self, namespace: str, key: str, callback: Callable[[], bool | None]) -> None:
        """Call ``callback`` now and whenever another process may have changed the key,
        until it returns False. It runs on the store's own thread and must not block.
        (A store with a single writer, like the embedded SQL one, calls it once.)"""
        ...

    def ping(self) -> None:
        """Raise if the store is unreachable."""
        ...

    def close(self) -> None:
        """Release connections."""
        ...
