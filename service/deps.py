"""Dependencies the routes take from the app (``app.state``): coordinator, stores, metrics."""

from __future__ import annotations

from fastapi import Request

from checkpoint.store.sql import SqlCheckpointStore
from coordinator.lifecycle import Coordinator
from coordinator.store.metadata import MetadataStore
from service.metrics import Metrics
from service.settings import Settings


def coordinator(request: Request) -> Coordinator:
    """The replica's coordinator."""
    found: Coordinator = request.app.state.coordinator
    return found


def checkpoint_store(request: Request) -> SqlCheckpointStore:
    """The checkpoint store."""
    found: SqlCheckpointStore = request.app.state.checkpoints
    return found


def metadata_store(request: Request) -> MetadataStore:
    """The metadata store."""
    found: MetadataStore = request.app.state.metadata_store
    return found


def metrics(request: Request) -> Metrics:
    """The app's metrics."""
    found: Metrics = request.app.state.metrics
    return found


def settings(request: Request) -> Settings:
    """The app's settings."""
    found: Settings = request.app.state.settings
    return found
