"""Commit fencing: a checkpoint commit is accepted only from the processor that owns every
task of it as active in the active job model, and owned it in every version that ran since
the version the commit is tagged with."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from coordinator.barrier import BarrierRepository, BarrierState
from coordinator.errors import Fenced
from grouping.model import JobModel

ModelOf = Callable[[int], Awaitable[JobModel | None]]


class CommitFence:
    """Checks a commit's ownership against the versions since its tag. ``model_of`` finds a
    version's job model (cached); final barrier states are remembered here."""

    def __init__(self, barriers: BarrierRepository, model_of: ModelOf) -> None:
        self._barriers = barriers
        self._model_of = model_of
        self._outcomes: dict[int, bool] = {}  # version -> its barrier was done

    async def check(self, active: JobModel, processor_id: str, version: int,
                    task_names: Sequence[str]) -> JobModel:
        """Fenced unless ``processor_id`` owns every task as active in ``active`` and owned
        it in every version from ``version`` on (a commit tagged with an older version is
        stale when the task was elsewhere in between: another processor has worked on it
        since). Returns the model of ``version``."""
        if version > active.version:
            raise Fenced(f"version {version} is not active (active: {active.version})")
        require_owner(active, processor_id, task_names,
                      f"processor {processor_id!r} does not own task {{task!r}} as active "
                      f"in the active job model (version {active.version})")
        if version == active.version:
            return active
        tagged = await self._model_of(version)
        if tagged is None:
            raise Fenced(f"version {version} is stale and no longer known")
        for v in range(active.version - 1, version - 1, -1):  # newest first: fails sooner
            # Only versions whose barrier completed can have had another processor work on
            # the task; a version superseded or timed out before that never ran anywhere
            # (a worker that never saw it rightly kept its query across it).
            if v != version and not await self.completed(v):
                continue
            model = tagged if v == version else await self._model_of(v)
            if model is None:
                raise Fenced(f"version {version} is stale: version {v} is no longer known")
            require_owner(model, processor_id, task_names,
                          f"version {version} is stale: processor {processor_id!r} did not "
                          f"own task {{task!r}} in version {v}")
        return tagged

    async def completed(self, version: int) -> bool:
        """Whether ``version``'s barrier was ever done (then processors may have run it);
        an unknown barrier counts as done. Final states are remembered."""
        known = self._outcomes.get(version)
        if known is not None:
            return known
        barrier = await asyncio.to_thread(self._barriers.load, version)
        if barrier is None:
            return True
        if barrier.state is not BarrierState.PENDING:
            self._outcomes[version] = barrier.state is BarrierState.DONE
        return barrier.state is BarrierState.DONE

    def forget_before(self, version: int) -> None:
        """Drop the outcomes of versions older than ``version`` (no model is kept)."""
        for old in [v for v in self._outcomes if v < version]:
            del self._outcomes[old]


def owners(model: JobModel) -> dict[str, str]:
    """Task name -> the processor running it as active (memoised on the model)."""
    return model.memo("owners", lambda m: m.active_owner())


def require_owner(model: JobModel, processor_id: str, task_names: Sequence[str],
                  refusal: str) -> None:
    """Fenced unless ``processor_id`` owns every task of ``task_names`` in ``model``;
    ``refusal`` names the task as ``{task!r}``."""
    owner = owners(model)
    for name in task_names:
        if owner.get(name) != processor_id:
            raise Fenced(refusal.format(task=name))
