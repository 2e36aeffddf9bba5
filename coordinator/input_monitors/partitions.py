"""Input partition counts discovered from Kafka, and what the coordinator does with them.

Every replica polls (so that each one's ``/status`` tells the truth); only the leader
acts. SEP-32 "input stream repartition": a stream that gained partitions gets new tasks
for them in a new job model, while existing tasks keep their processors and checkpoints
and the configured elasticity factor is kept. What must never happen is that a missing
topic or an unreachable broker wipes the current job model: those are reported in
``/status`` and logged once per change. A stream that lost partitions (deleted and
recreated) is refused until an operator pins its count (``--input kafka.orders:4``)
after deciding what to do with its checkpoints.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Protocol

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from common.kafka_clients import Brokers, settings_of
from coordinator.input_monitors.poller import (
    InputPoller,
    InputState,
    SourceUnavailable,
    StreamStatus,
)
from grouping.model import SystemStreamPartition

log = logging.getLogger("coxswain.inputs")


class PartitionSource(Protocol):
    """Where partition counts come from."""

    def partition_counts(self, streams: Sequence[str]) -> dict[str, int | None]:
        """stream -> partition count (None: no such stream). Raises SourceUnavailable."""
        ...


class KafkaPartitionSource:
    """Partition counts from a Kafka cluster's metadata (confluent-kafka AdminClient)."""

    def __init__(self, bootstrap: Brokers, timeout_s: float = 5.0) -> None:
        self._admin = AdminClient(settings_of(bootstrap).client({"log_level": 3}))
        self._timeout_s = timeout_s

    def partition_counts(self, streams: Sequence[str]) -> dict[str, int | None]:
        """stream -> partition count (None: no such topic)."""
        try:
            metadata = self._admin.list_topics(timeout=self._timeout_s)
        except KafkaException as e:
            raise SourceUnavailable(f"Kafka unreachable: {e.args[0]}") from e
        out: dict[str, int | None] = {}
        for stream in streams:
            topic = metadata.topics.get(stream)
            out[stream] = None if topic is None or topic.error is not None \
                else len(topic.partitions)
        return out


def plan_inputs(
    current: Mapping[str, int | None], observed: Mapping[str, int | None],
) -> tuple[dict[str, int], dict[str, tuple[InputState, str]]]:
    """Pure decision: the partition count to use per stream, and each stream's state.

    ``current``: counts the job uses now (None: never known). Growth is taken; a missing
    stream or a shrink keeps the current count (and says why).
    """
    use: dict[str, int] = {}
    states: dict[str, tuple[InputState, str]] = {}
    for stream, known in current.items():
        seen = observed.get(stream)
        if seen is None:
            states[stream] = (InputState.MISSING, f"topic {stream!r} does not exist")
            if known is not None:
                use[stream] = known
        elif known is not None and seen < known:
            states[stream] = (InputState.SHRUNK, (
                f"topic {stream!r} has {seen} partitions, fewer than the job's {known} "
                "(deleted and recreated?): refused; pin the count with "
                f"--input SYSTEM.{stream}:{seen} once its checkpoints are dealt with"))
            use[stream] = known
        else:
            states[stream] = (InputState.OK, "")
            use[stream] = seen
    return use, states


class PartitionMonitor(InputPoller):
    """Polls partition counts of the monitored streams and applies growth (leader)."""

    def __init__(
        self,
        system_streams: Iterable[tuple[str, str]],
        source: PartitionSource,
        interval_s: float,
        current: Callable[[], Iterable[SystemStreamPartition]],
        apply: Callable[[list[SystemStreamPartition]], Awaitable[None]],
        is_leader: Callable[[], bool],
    ) -> None:
        super().__init__(system_streams, interval_s, is_leader, "partition-monitor")
        self._source = source
        self._current = current
        self._apply = apply

    async def poll_once(self) -> None:
        """One poll: record what Kafka says; on the leader, apply growth."""
        if not self._streams:
            return
        counts_now: dict[str, int | None] = {st: None for _, st in self._streams}
        for ssp in self._current():
            if ssp.stream in counts_now:
                counts_now[ssp.stream] = max(counts_now[ssp.stream] or 0, ssp.partition + 1)
        try:
            observed = await asyncio.to_thread(
                self._source.partition_counts, [st for _, st in self._streams])
        except SourceUnavailable as e:
            for system, stream in self._streams:
                self._set(StreamStatus(system, stream, counts_now[stream],
                                       self._status[(system, stream)].observed,
                                       InputState.UNREACHABLE, str(e)))
            return
        use, states = plan_inputs(counts_now, observed)
        for system, stream in self._streams:
            state, detail = states[stream]
            self._set(StreamStatus(system, stream, use.get(stream), observed.get(stream),
                                   state, detail))
        if not self._is_leader():
            return
        wanted = {(sys, st): use[st] for sys, st in self._streams if st in use}
        if any(counts_now[st] != n for (_, st), n in wanted.items()):
            keep = [s for s in self._current() if (s.system, s.stream) not in wanted]
            grown = [SystemStreamPartition(sys, st, p)
                     for (sys, st), n in wanted.items() for p in range(n)]
            log.info("input partitions changed: %s", ", ".join(
                f"{sys}.{st} {counts_now[st]} -> {n}" for (sys, st), n in wanted.items()
                if counts_now[st] != n), extra={"reason": "inputs_changed"})
            await self._apply(sorted({*keep, *grown}))

