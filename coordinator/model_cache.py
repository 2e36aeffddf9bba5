"""The job models a coordinator keeps in memory: the most recently used few.

Each model of 100k tasks holds its prerendered containers and derived indexes (tens of
megabytes); keeping every version ever published grew a leader by gigabytes over a few
hundred rebalances. Older versions are read back from the store when a late commit or ack
names one.
"""

from __future__ import annotations

from collections import OrderedDict

from grouping.model import JobModel

#: Versions kept: the latest, the one before it (commits of the barrier in progress) and a
#: few older ones for slow processors.
DEFAULT_CAPACITY = 8


class ModelCache:
    """Job models by version, least recently used dropped beyond ``capacity``."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self._capacity = capacity
        self._models: OrderedDict[int, JobModel] = OrderedDict()

    def get(self, version: int) -> JobModel | None:
        model = self._models.get(version)
        if model is not None:
            self._models.move_to_end(version)
        return model

    def put(self, model: JobModel) -> None:
        self._models[model.version] = model
        self._models.move_to_end(model.version)
        while len(self._models) > self._capacity:
            self._models.popitem(last=False)

    def __len__(self) -> int:
        return len(self._models)

    def __contains__(self, version: object) -> bool:
        return version in self._models
