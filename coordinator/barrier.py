"""The barrier of a job model version: every processor of the new model acknowledges.

States: PENDING -> DONE (every participant acked) or PENDING -> TIMED_OUT (the barrier
timeout passed; the leader then regenerates without the silent processors). Stored under
``barriers/{version:020d}`` so that a restarted coordinator knows where it was.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from coordinator.store.metadata import MetadataStore

NAMESPACE = "barriers"


class BarrierState(StrEnum):
    """The states of API.md: ``pending``, ``done``, ``timedOut``."""

    PENDING = "pending"
    DONE = "done"
    TIMED_OUT = "timedOut"


@dataclass(frozen=True, slots=True)
class Barrier:
    """Who must acknowledge a version, who did, and how it ended."""

    version: int
    state: BarrierState
    participants: frozenset[str]
    acked: frozenset[str]
    started_at: float
    ended_at: float | None = None

    @staticmethod
    def opened(version: int, participants: frozenset[str], now: float) -> Barrier:
        """The barrier of a version as published: pending, or done at once when no
        processor takes part."""
        if not participants:
            return Barrier(version, BarrierState.DONE, participants, frozenset(), now, now)
        return Barrier(version, BarrierState.PENDING, participants, frozenset(), now)

    @property
    def silent(self) -> frozenset[str]:
        """Participants that have not acknowledged."""
        return self.participants - self.acked

    def ack(self, processor_id: str, now: float) -> Barrier:
        """The barrier after ``processor_id`` acknowledged (DONE once everyone has)."""
        if self.state is not BarrierState.PENDING:
            return self
        acked = self.acked | {processor_id}
        if acked >= self.participants:
            return replace(self, acked=acked, state=BarrierState.DONE, ended_at=now)
        return replace(self, acked=acked)

    def ack_many(self, processor_ids: frozenset[str], now: float) -> Barrier:
        """:meth:`ack` of each of ``processor_ids`` (participants), in one step."""
        if self.state is not BarrierState.PENDING or processor_ids <= self.acked:
            return self
        acked = self.acked | processor_ids
        if acked >= self.participants:
            return replace(self, acked=acked, state=BarrierState.DONE, ended_at=now)
        return replace(self, acked=acked)

    def time_out(self, now: float) -> Barrier:
        """The barrier after its timeout passed (only a pending one changes)."""
        if self.state is not BarrierState.PENDING:
            return self
        return replace(self, state=BarrierState.TIMED_OUT, ended_at=now)

    def to_bytes(self) -> bytes:
        """JSON for the metadata store."""
        return json.dumps({
            "version": self.version, "state": self.state.value,
            "participants": sorted(self.participants), "acked": sorted(self.acked),
            "startedAt": self.started_at, "endedAt": self.ended_at,
        }, sort_keys=True).encode()

    @staticmethod
    def from_bytes(raw: bytes) -> Barrier:
        """Inverse of :meth:`to_bytes`."""
        d = json.loads(raw)
        return Barrier(int(d["version"]), BarrierState(d["state"]),
                       frozenset(d["participants"]), frozenset(d["acked"]),
                       float(d["startedAt"]), d.get("endedAt"))


class BarrierRepository:
    """Barriers by version in the metadata store."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    def save(self, barrier: Barrier) -> None:
        """Write the barrier's current state."""
        self._store.put(NAMESPACE, f"{barrier.version:020d}", barrier.to_bytes())

    def load(self, version: int) -> Barrier | None:
        """The barrier of ``version``, if recorded."""
        found = self._store.get(NAMESPACE, f"{version:020d}")
        return None if found is None else Barrier.from_bytes(found.value)

    def update(self, version: int, change: Callable[[Barrier], Barrier]) -> Barrier | None:
        """Apply ``change`` to the stored barrier of ``version`` with compare-and-set,
        retrying when another replica wrote it meanwhile (acks reach any replica).
        Returns the barrier as stored afterwards, or None if ``version`` has none."""
        key = f"{version:020d}"
        while True:
            found = self._store.get(NAMESPACE, key)
            if found is None:
                return None
            current = Barrier.from_bytes(found.value)
            updated = change(current)
            if updated == current:
                return current
            if self._store.compare_and_set(NAMESPACE, key, updated.to_bytes(),
                                           found.version) is not None:
                return updated

    def prune(self, keep_from: int) -> None:
        """Forget barriers of versions below ``keep_from``."""
        for key in self._store.keys(NAMESPACE):
            if int(key) < keep_from:
                self._store.delete(NAMESPACE, key)
