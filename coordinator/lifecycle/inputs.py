"""The job's input partitions as the lifecycle knows them: configured, discovered by the
partition monitor (Kafka), or listed as shards with their lineage (Kinesis)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from grouping.model import JobModel, SystemStreamPartition
from grouping.shards import CONFIG_KEY as SHARDS
from grouping.shards import Shard, lineage_of_config, lineage_to_config

Stream = tuple[str, str]  # (system, stream)


class JobInputs:
    """The whole input partitions, and the shard lineage of Kinesis streams (which goes
    into every job model's config)."""

    def __init__(self, configured: Iterable[SystemStreamPartition],
                 monitored_streams: Iterable[Stream] = (),
                 shard_streams: Iterable[Stream] = ()) -> None:
        self._partitions = tuple(sorted({s.whole() for s in configured}))
        # streams whose partition count is discovered: their partitions come from the
        # latest job model until the partition monitor reports
        self._monitored = frozenset(monitored_streams)
        self._shard_streams = frozenset(shard_streams)
        self._lineage: dict[Stream, dict[int, Shard]] = {}

    @property
    def partitions(self) -> tuple[SystemStreamPartition, ...]:
        """The whole input partitions, sorted."""
        return self._partitions

    def job_config(self) -> dict[str, Any] | None:
        """What a job model's config carries of the inputs: the shard lineage, if any."""
        return {SHARDS: lineage_to_config(self._lineage)} if self._lineage else None

    def adopt(self, model: JobModel | None) -> None:
        """Partitions of monitored streams as ``model`` has them (the leader that generated
        it may have seen partitions added that this replica has not); the shards of
        Kinesis streams and their lineage exactly as it has them."""
        if model is not None and SHARDS in model.config:
            # the streams this coordinator reads (a restart may have changed --input)
            self._lineage = {k: v for k, v in lineage_of_config(model.config).items()
                             if k in self._shard_streams}
            listed = {SystemStreamPartition(system, stream, p)
                      for (system, stream), shards in self._lineage.items() for p in shards}
            self._partitions = tuple(sorted(
                {s for s in self._partitions if (s.system, s.stream) not in self._lineage}
                | listed))
        if model is None or not self._monitored:
            return
        monitored = self._monitored
        seen = {s.whole() for c in model.containers.values() for t in c.active_tasks
                for s in t.ssps if (s.system, s.stream) in monitored}
        if not seen:
            return
        kept = {s for s in self._partitions if (s.system, s.stream) not in monitored}
        mine = {s for s in self._partitions if (s.system, s.stream) in monitored}
        if len(seen) > len(mine):
            self._partitions = tuple(sorted(kept | seen))

    def replace(self, partitions: Iterable[SystemStreamPartition]) -> bool:
        """Take a changed partition set (e.g. partitions added); True if it changed."""
        whole = tuple(sorted({s.whole() for s in partitions}))
        if whole == self._partitions:
            return False
        self._partitions = whole
        return True

    def list_shards(self, system: str, stream: str, shards: Mapping[int, Shard]
                    ) -> tuple[bool, list[SystemStreamPartition]]:
        """A Kinesis stream's shard listing: its partitions become exactly the listed
        shards (children added, expired parents gone). Returns whether the partitions or
        the lineage changed, and the partitions that left."""
        key = (system, stream)
        listed = {SystemStreamPartition(system, stream, p) for p in shards}
        mine = {s for s in self._partitions if (s.system, s.stream) == key}
        partitions = tuple(sorted(
            {s for s in self._partitions if (s.system, s.stream) != key} | listed))
        lineage = {**self._lineage, key: dict(shards)}
        changed = partitions != self._partitions or lineage != self._lineage
        self._partitions, self._lineage = partitions, lineage
        return changed, sorted(mine - listed)

    def grouped_differently(self, model: JobModel) -> bool:
        """True when ``model``'s tasks read other partitions than these."""
        grouped = {s.whole() for c in model.containers.values()
                   for t in c.active_tasks for s in t.ssps}
        return bool(model.containers) and grouped != set(self._partitions)
