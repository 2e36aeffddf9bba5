"""Dependencies the routes take from the app (``app.state``): coordinator, stores, metrics.

All are ``async def``: FastAPI runs plain ``def`` dependencies in a thread pool, which
would cost two thread hops per request for a mere attribute lookup.
"""

from __future__ import annotations

from fastapi import Request

from checkpoint.store.sql import SqlCheckpointStore
from coordinator.lifecycle import Coordinator
from coordinator.store.metadata import MetadataStore
from service.metrics import Metrics
from service.settings import Settings


async def coordinator(request: Request) -> Coordinator:
    """The replica's coordinator."""
    found: Coordinator = request.app.state.coordinator
    return found


async def checkpoint_store(request: Request) -> SqlCheckpointStore:
    """The checkpoint store."""
    found: SqlCheckpointStore = request.app.state.checkpoints
    return found


async def metadata_store(request: Request) -> MetadataStore:
    """The metadata store."""
    found: MetadataStore = request.app.state.metadata_store
    return found


async def metrics(request: Request) -> Metrics:
    """The app's metrics."""
    found: Metrics = request.app.state.metrics
    return found


async def settings(request: Request) -> Settings:
    """The app's settings."""
    found: Settings = request.app.state.settings
    return found
