"""Job models by version in the metadata store, and the version pointers.

Layout (namespaces of the MetadataStore):
* ``jobModels/{version:020d}``: the model as zlib-compressed JSON (any size);
* ``jobModelVersion/latest``: the newest published version;
* ``jobModelVersion/active``: the newest version whose barrier completed.

Publishing writes the version's body (and, through ``before_pointer``, its barrier) and
then moves ``latest`` with compare-and-set on its store version, checked against the
leader's epoch: two publishers can never both publish a version, and versions only go up.
Moving the pointer is the one step that publishes, so a crash at any point leaves either
a complete publication or none: a body or barrier written for a version the pointer never
reached is an orphan nobody reads, and the next publication of that version overwrites it
(under the same epoch fence, so a deposed leader cannot).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable

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
                fence: Fence | None = None,
                before_pointer: Callable[[], None] | None = None) -> bool:
        """Store ``model`` and make it the latest, if nobody published since the caller read
        the pointer at ``pointer_version`` (None: no model yet) and ``fence`` (the leader's
        epoch) still holds. ``before_pointer`` writes what must exist once the version is
        visible (its barrier). False when fenced."""
        latest = self.latest()
        if (latest[1] if latest is not None else None) != pointer_version:
            return False  # someone published since the caller read the pointer
        if latest is not None and model.version <= latest[0]:
            return False
        # level 1: a 100k-task model in tens of milliseconds instead of hundreds, a
        # little larger
        body = zlib.compress(job_model_to_bytes(model), 1)
        orphan = self._store.get(MODELS, _key(model.version))
        if self._store.compare_and_set(MODELS, _key(model.version), body,
                                       None if orphan is None else orphan.version,
                                       fence) is None:
            return False
        if before_pointer is not None:
            before_pointer()
        moved = self._store.compare_and_set(
            VERSIONS, "latest", json.dumps(model.version).encode(), pointer_version, fence)
        if moved is None:
            return False  # the body stays an orphan until this version is published
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
