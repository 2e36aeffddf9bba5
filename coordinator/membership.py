"""Processor membership by leases.

State per processor: REGISTERED (lease live) -> renewed by each heartbeat -> EXPIRED (no
heartbeat for the lease TTL) or LEFT (DELETE). Leases are persisted in the metadata store
(namespace ``processors``) so that a restarted coordinator keeps them until they expire;
task lags and stats from heartbeats live in memory only (workers report them again).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from coordinator.clock import Clock
from coordinator.errors import ProcessorConflict, UnknownProcessor
from coordinator.store.metadata import MetadataStore

NAMESPACE = "processors"


@dataclass(frozen=True, slots=True)
class ProcessorLease:
    """A live processor: where it runs and until when its lease holds."""

    processor_id: str
    location_id: str
    host: str | None
    registered_at: float
    expires_at: float

    def to_bytes(self) -> bytes:
        """JSON for the metadata store."""
        return json.dumps(asdict(self), sort_keys=True).encode()

    @staticmethod
    def from_bytes(raw: bytes) -> ProcessorLease:
        """Inverse of :meth:`to_bytes`."""
        data = json.loads(raw)
        return ProcessorLease(data["processor_id"], data["location_id"], data.get("host"),
                              float(data["registered_at"]), float(data["expires_at"]))


def new_processor_id() -> str:
    """A fresh processor id when a worker does not bring its own."""
    return f"processor-{uuid.uuid4().hex[:12]}"


class Membership:
    """Registered processors and their leases."""

    def __init__(
        self,
        store: MetadataStore,
        clock: Clock,
        lease_ttl_s: float,
        id_factory: Callable[[], str] = new_processor_id,
    ) -> None:
        self._store = store
        self._clock = clock
        self._ttl = lease_ttl_s
        self._new_id = id_factory
        self._leases: dict[str, ProcessorLease] = {}
        self._lags: dict[str, dict[str, int]] = {}
        self._stats: dict[str, dict[str, Any]] = {}

    @property
    def lease_ttl_s(self) -> float:
        """How long a lease holds without a heartbeat."""
        return self._ttl

    def load(self) -> None:
        """Read persisted leases (after a restart)."""
        stored = self._store.list(NAMESPACE)
        self._leases = {pid: ProcessorLease.from_bytes(v.value) for pid, v in stored.items()}

    def live(self) -> Mapping[str, ProcessorLease]:
        """Processors whose lease has not been expired by :meth:`expire` or left."""
        return dict(self._leases)

    def locations(self) -> dict[str, str]:
        """processor id -> location id, for every registered processor."""
        return {pid: lease.location_id for pid, lease in sorted(self._leases.items())}

    def task_lags(self) -> dict[str, dict[str, int]]:
        """processor id -> task lags from its last heartbeat."""
        return {pid: dict(lags) for pid, lags in self._lags.items() if pid in self._leases}

    def stats(self) -> dict[str, dict[str, Any]]:
        """processor id -> stats from its last heartbeat."""
        return {pid: dict(s) for pid, s in self._stats.items() if pid in self._leases}

    def register(
        self, processor_id: str | None, location_id: str, host: str | None
    ) -> tuple[ProcessorLease, bool]:
        """Register (or re-register) a processor; returns its lease and whether it is new.

        Raises:
            ProcessorConflict: the id is live at another location.
        """
        now = self._clock.now()
        pid = processor_id or self._new_id()
        current = self._leases.get(pid)
        if current is not None and current.expires_at > now:
            if current.location_id != location_id:
                raise ProcessorConflict(
                    f"processor {pid!r} is live at location {current.location_id!r}, "
                    f"not {location_id!r}")
            lease = replace(current, host=host or current.host, expires_at=now + self._ttl)
            self._save(lease)
            return lease, False
        lease = ProcessorLease(pid, location_id, host, now, now + self._ttl)
        self._save(lease)
        self._lags.pop(pid, None)
        self._stats.pop(pid, None)
        return lease, True

    def heartbeat(
        self,
        processor_id: str,
        task_lags: Mapping[str, int] | None = None,
        stats: Mapping[str, Any] | None = None,
    ) -> ProcessorLease:
        """Renew a lease and record lags and stats.

        Raises:
            UnknownProcessor: not registered, or the lease already expired.
        """
        now = self._clock.now()
        current = self._leases.get(processor_id)
        if current is None or current.expires_at <= now:
            raise UnknownProcessor(
                f"processor {processor_id!r} is not registered or its lease expired; "
                "register again")
        lease = replace(current, expires_at=now + self._ttl)
        self._save(lease)
        if task_lags is not None:
            self._lags[processor_id] = dict(task_lags)
        if stats is not None:
            self._stats[processor_id] = dict(stats)
        return lease

    def require(self, processor_id: str) -> ProcessorLease:
        """The live lease of ``processor_id``, or UnknownProcessor."""
        lease = self._leases.get(processor_id)
        if lease is None or lease.expires_at <= self._clock.now():
            raise UnknownProcessor(f"processor {processor_id!r} is not registered")
        return lease

    def leave(self, processor_id: str) -> bool:
        """Remove a processor now; True if it was registered."""
        if processor_id not in self._leases:
            return False
        self.remove([processor_id])
        return True

    def expired(self) -> list[str]:
        """Processors whose lease ran out, in id order (still registered until removed)."""
        now = self._clock.now()
        return sorted(pid for pid, lease in self._leases.items() if lease.expires_at <= now)

    def remove(self, processor_ids: list[str]) -> None:
        """Drop processors (expired, left, or silent at a barrier)."""
        for pid in processor_ids:
            if self._leases.pop(pid, None) is not None:
                self._store.delete(NAMESPACE, pid)
            self._lags.pop(pid, None)
            self._stats.pop(pid, None)

    def next_expiry(self) -> float | None:
        """The earliest lease expiry time, if any processor is registered."""
        return min((lease.expires_at for lease in self._leases.values()), default=None)

    def _save(self, lease: ProcessorLease) -> None:
        self._store.put(NAMESPACE, lease.processor_id, lease.to_bytes())
        self._leases[lease.processor_id] = lease
