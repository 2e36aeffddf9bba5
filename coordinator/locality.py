"""Task locality (task -> location id where it last ran) and the desired job config.

Task locality is written when a version's barrier completes: from then on the tasks run
where that version put them. The desired config holds what operators set (the elasticity
factor); the job model's config records what a version was generated with.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from coordinator.store.metadata import MetadataStore

TASK_LOCALITY = "taskLocality"
CONFIG = "config"


class TaskLocality:
    """task name -> location id, in the metadata store."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    def read(self) -> dict[str, str]:
        """Every known task locality."""
        return {k: v.value.decode() for k, v in self._store.list(TASK_LOCALITY).items()}

    def write(self, locality: Mapping[str, str], known: Mapping[str, str]) -> None:
        """Record ``locality``, writing only entries that differ from ``known``."""
        changed = {t: loc.encode() for t, loc in locality.items() if known.get(t) != loc}
        self._store.put_many(TASK_LOCALITY, changed)


class DesiredConfig:
    """Operator-set config (``elasticityFactor``), in the metadata store."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    def read(self) -> dict[str, Any]:
        """The desired config, empty when never set."""
        found = self._store.get(CONFIG, "desired")
        return {} if found is None else dict(json.loads(found.value))

    def update(self, **values: Any) -> dict[str, Any]:
        """Merge ``values`` into the desired config and return it."""
        config = {**self.read(), **values}
        self._store.put(CONFIG, "desired", json.dumps(config, sort_keys=True).encode())
        return config
