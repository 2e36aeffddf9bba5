"""Task locality (task -> location id where it last ran) and the desired job config.

Task locality is written when a version's barrier completes: from then on the tasks run
where that version put them. The desired config holds what operators set (the elasticity
factor); the job model's config records what a version was generated with.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from coordinator.store.metadata import MetadataStore

TASK_LOCALITY = "taskLocality"
CONFIG = "config"
#: the heartbeat stat in which a worker names the host each of its tasks' state is on,
#: when that is not its own location (a worker on a Spark cluster whose executors keep
#: the state, on several hosts): ``{"taskHosts": {task: host}}``
TASK_HOSTS = "taskHosts"
MAX_LOCATION = 255  # characters of a reported host (as of a location id)
log = logging.getLogger("coxswain.coordinator")


def reported_locations(owners: Mapping[str, Iterable[str]],
                       stats: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """task -> the host its owner reports its state on (``TASK_HOSTS`` of the owner's
    last heartbeat stats), for the tasks each processor of ``owners`` (processor id ->
    its active tasks) owns. A report of a task another processor owns now, or a value
    that is not a host name, is ignored: localities are hints, never an error."""
    found: dict[str, str] = {}
    for pid, tasks in owners.items():
        hosts = (stats.get(pid) or {}).get(TASK_HOSTS)
        if not isinstance(hosts, Mapping):
            continue
        for task in tasks:
            host = hosts.get(task)
            if isinstance(host, str) and 0 < len(host) <= MAX_LOCATION:
                found[task] = host
    return found


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


class LocalityWriter:
    """Writes task localities in the background, one write after the other in the order
    asked. A factor change gives every task a new name: 200k localities took ZooKeeper
    ten seconds to write, which must not hold the coordinator's lock (heartbeats, acks
    and the next rebalance wait on it). Whoever must see them stored (the ack that
    completes a barrier, a stopping coordinator) awaits :meth:`flush`."""

    def __init__(self, locality: TaskLocality) -> None:
        self._locality = locality
        self._tail: asyncio.Task[None] | None = None

    def write(self, locality: Mapping[str, str], known: Mapping[str, str]) -> None:
        """Queue a write of ``locality`` (entries that differ from ``known``)."""
        self._tail = asyncio.get_running_loop().create_task(
            self._write_after(self._tail, locality, known))

    async def flush(self) -> None:
        """Return once every write asked so far has ended (failed ones are logged)."""
        tail = self._tail
        if tail is not None:
            await asyncio.shield(tail)

    async def _write_after(self, previous: asyncio.Task[None] | None,
                           locality: Mapping[str, str], known: Mapping[str, str]) -> None:
        if previous is not None:
            await previous
        try:
            await asyncio.to_thread(self._locality.write, locality, known)
        except Exception as e:  # a lost write costs host affinity only, never data
            log.warning("task locality not written (%d tasks): %s", len(locality), e)


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
