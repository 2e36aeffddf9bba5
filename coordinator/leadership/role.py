"""The leader role: which replica generates job models, and its fencing epoch.

In the embedded mode the single process is always the leader. The ZooKeeper issue adds an
implementation with kazoo's election; every publication carries the epoch so that a
deposed leader cannot publish.
"""

from __future__ import annotations

from typing import Protocol

from coordinator.store.metadata import Fence


class LeaderRole(Protocol):
    """Whether this replica may act as the leader right now."""

    @property
    def replica_id(self) -> str:
        """This replica's id."""
        ...

    def is_leader(self) -> bool:
        """True while this replica holds leadership."""
        ...

    def leader_id(self) -> str | None:
        """The current leader's replica id, if one is known."""
        ...

    @property
    def epoch(self) -> int:
        """Increases each time leadership changes hands."""
        ...

    def fence(self) -> Fence | None:
        """What each job-model publication must check in the store (None: nothing)."""
        ...

    def serves_commits(self) -> bool:
        """Whether this replica may judge checkpoint commits now: any replica of an
        elected group (they share the store's view), but a coordinator that leads a store
        alone only while it holds its lease."""
        ...


class EmbeddedLeader:
    """One process, always the leader (epoch 1)."""

    def __init__(self, replica_id: str) -> None:
        self._replica_id = replica_id

    @property
    def replica_id(self) -> str:
        """This replica's id."""
        return self._replica_id

    def is_leader(self) -> bool:
        """Always True."""
        return True

    def leader_id(self) -> str | None:
        """This replica."""
        return self._replica_id

    @property
    def epoch(self) -> int:
        """Always 1."""
        return 1

    def fence(self) -> Fence | None:
        """None: a single process has nobody to be fenced from."""
        return None

    def serves_commits(self) -> bool:
        """Always True."""
        return True
