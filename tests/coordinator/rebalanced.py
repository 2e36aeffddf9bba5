"""A version for the processors registered so far, whichever rebalance made it."""

from __future__ import annotations

import asyncio

from coordinator.lifecycle import Coordinator
from grouping.model import JobModel


async def rebalanced(coordinator: Coordinator) -> JobModel:
    """Rebalance now and return the latest version. A coordinator that just started looks
    at the store first, as a new leader; processors registered before that look make it
    generate at once ("start"), and the explicit rebalance then finds nothing changed
    (returns None): the version it would have made is the latest already."""
    # after that look: else it may come later and regenerate for processors registered
    # after this version (on a loaded machine the look can take seconds)
    await asyncio.wait_for(coordinator.lead_started(), 60)
    model = await coordinator.rebalance("test")
    if model is None:
        model = coordinator.latest
    assert model is not None
    return model
