"""A version for the processors registered so far, whichever rebalance made it."""

from __future__ import annotations

from coordinator.lifecycle import Coordinator
from grouping.model import JobModel


async def rebalanced(coordinator: Coordinator) -> JobModel:
    """Rebalance now and return the latest version. A coordinator that just started looks
    at the store first, as a new leader; processors registered before that look make it
    generate at once ("start"), and the explicit rebalance then finds nothing changed
    (returns None): the version it would have made is the latest already."""
    model = await coordinator.rebalance("test")
    if model is None:
        model = coordinator.latest
    assert model is not None
    return model
