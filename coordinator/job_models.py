"""Job models by version in the metadata store, and the version pointers.

Layout (namespaces of the MetadataStore):
* ``jobModels/{version:020d}``: the model as zlib-compressed JSON (any size);
* ``jobModelVersion/latest``: the newest published version;
* ``jobModelVersion/active``: the newest version whose barrier completed.

Publishing claims the version's body key with compare-and-set (it must not exist) and then
moves ``latest`` with compare-and-set on its store version, so two publishers can never
both publish a version, and versions only go up.
"""

from __future__ import annotations

import json
import zlib

from coordinator.store.metadata import Fence, MetadataStore
from grouping.model import JobModel
from grouping.serde import job_model_from_bytes, job_model_to_bytes

MODELS = "jobModels"
VERSIONS = "jobModelVersion"


def _key(version: int) -> str:
    return f"{version:020d}"


class JobModelRepository:
    """Read and publish job models; keeps the last ``keep_last`` versions."""

    def __init__(self, store: MetadataStore, keep_last: int = 10) -> None:
        self._store = store
        self._keep_last = keep_last

    def latest(self) -> tuple[int, int] | None:
        """(latest published version, store version of the pointer), or None."""
        found = self._store.get(VERSIONS, "latest")
        if found is None:
            return None
        return int(json.loads(found.value)), found.version

    def publish(self, model: JobModel, pointer_version: int | None,
                fence: Fence | None = None) -> bool:
        """Store ``model`` and make it the latest, if nobody published since the caller read
        the pointer at ``pointer_version`` (None: no model yet) and ``fence`` (the leader's
        epoch) still holds. False when fenced."""
        body = zlib.compress(job_model_to_bytes(model), 6)
        if self._store.compare_and_set(MODELS, _key(model.version), body, None) is None:
            return False
        moved = self._store.compare_and_set(
            VERSIONS, "latest", json.dumps(model.version).encode(), pointer_version, fence)
        if moved is None:
            self._store.delete(MODELS, _key(model.version))
            return False
        self._prune(model.version)
        return True

    def load(self, version: int) -> JobModel | None:
        """The model of ``version``, or None if it is unknown (or pruned)."""
        found = self._store.get(MODELS, _key(version))
        if found is None:
            return None
        return job_model_from_bytes(zlib.decompress(found.value), version)

    def active_version(self) -> int | None:
        """The newest version whose barrier completed."""
        found = self._store.get(VERSIONS, "active")
        return None if found is None else int(json.loads(found.value))

    def set_active(self, version: int) -> None:
        """Record that ``version``'s barrier completed."""
        self._store.put(VERSIONS, "active", json.dumps(version).encode())

    def _prune(self, newest: int) -> None:
        # The active version is kept even when older than the window: fencing reads it.
        active = self.active_version()
        for key in self._store.keys(MODELS):
            version = int(key)
            if version <= newest - self._keep_last and version != active:
                self._store.delete(MODELS, key)
