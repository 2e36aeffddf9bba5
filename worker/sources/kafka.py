"""A Kafka source for Spark Structured Streaming that follows the worker's assignment
(PySpark's Python data source API, with confluent-kafka).

Spark's own Kafka source reads a partition set fixed when its query starts; a worker
that kept one query for its life while its tasks change needs a source that plans each
micro-batch from the current assignment: this one reads ``worker.sources.source_plan`` (the
partitions and where each starts) at every trigger, in the driver's source process, and
asks the broker for the partitions' ends (the last stable offsets, as a read-committed
consumer sees them) in one request. A batch is a range ``[from, to)`` of every Kafka
partition with records; the executors' Python workers read exactly those
offsets with a consumer assigned to them (no consumer group, nothing committed: Coxswain's
per-bucket checkpoints decide where tasks start) and hand Spark Arrow record batches. The
ranges of a batch are read by at most as many Spark tasks as there are cores
(:class:`KafkaRead`).

Offsets (Spark's log of each batch): ``{"v": plan version, "r": readers, "p":
{"topic/partition": {"from", "to", "g"}}}``: the batch's range of every partition and
the generation of the plan's start it continues from (``worker.sources.source_plan``), also a
column of every row (``gen``: ``worker.running`` counts a task's batches from its
generation on); ``r``, the most Spark tasks reading it (:func:`readers_of`). With no new
record and no change of plan, the end is the start again, so Spark runs no batch.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from common.kafka_clients import Brokers, KafkaClientSettings, plain, settings_of
from worker.python_workers import settle
from worker.sources.kafka_consumers import ConsumerPool, pool
from worker.sources.pacing import Pacing, adds
from worker.sources.source_plan import EARLIEST, LATEST, SourcePlan, read_plan, split_key

NAME = "coxswain-kafka"
SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, gen int")
READ_STALL_S = 60.0  # an executor waiting this long for offsets the broker had: fail
CHUNK = 20_000  # records per Arrow batch handed to Spark
#: the longest one poll of a range waits. A range ending at a transaction's commit
#: marker (read_committed; any transactional producer upstream, Coxswain's exactly-once
#: output among them) asks for one record more than the consumer will ever hand out:
#: the poll waits its whole timeout, then the position is found past the marker. At 1 s
#: that was a second per partition on every batch ending at a commit (measured: a batch
#: of 4 654 records took 2.4 s); the position moves past the marker within one short poll
POLL_S = 0.05


@dataclass
class KafkaRange(InputPartition):
    """One Spark input partition: the records of one Kafka partition in [start, end),
    read at the partition's source generation ``gen`` (a column of every row)."""

    topic: str
    partition: int
    start: int
    end: int
    gen: int = 0


@dataclass
class KafkaRead(InputPartition):
    """One Spark input partition: ranges of several Kafka partitions, read one after the
    other. A batch has at most as many as the worker has cores (``readers``): every
    Spark task that runs Python costs a fixed ~50-90 ms on a small host, more than
    reading a range from a consumer that prefetched it, and a batch's fixed cost bounds
    how short batches (and handovers) can be."""

    ranges: tuple[KafkaRange, ...]


def _groups(ranges: list[KafkaRange], readers: int) -> list[KafkaRead]:
    """``ranges`` spread over at most ``readers`` input partitions, the biggest first,
    each onto the least loaded (in records)."""
    groups: list[list[KafkaRange]] = [[] for _ in range(max(1, min(readers, len(ranges))))]
    loads = [0] * len(groups)
    for r in sorted(ranges, key=lambda r: (r.start - r.end, r.topic, r.partition)):
        i = loads.index(min(loads))
        groups[i].append(r)
        loads[i] += r.end - r.start
    return [KafkaRead(tuple(sorted(g, key=lambda r: (r.topic, r.partition)))) for g in groups
            if g]


def ranges_of(offsets: Mapping[str, Any]) -> list[KafkaRange]:
    """The ranges with records of the batch of ``offsets`` (the end offset a batch was
    planned to), by topic and partition."""
    return [KafkaRange(*split_key(k), int(r["from"]), int(r["to"]), int(r["g"]))
            for k, r in sorted((offsets.get("p") or {}).items()) if r["to"] > r["from"]]


def reads_of(offsets: Mapping[str, Any], readers: int | None = None) -> list[KafkaRead]:
    """The Spark input partitions reading the batch of ``offsets`` (the end offset a
    batch was planned to): its ranges with records over at most ``readers`` (default:
    the ``r`` it was planned with)."""
    return _groups(ranges_of(offsets), max(1, int(offsets.get("r") or 1)) if readers is None
                   else readers)


def readers_of(offsets: Mapping[str, Any]) -> int:
    """How many Spark tasks read the batch of ``offsets`` (the end offset a batch was
    planned to): one per Kafka partition with records, at most ``r``. Every Kafka
    partition's records are read by one of them, in offset order."""
    ranges = sum(1 for r in (offsets.get("p") or {}).values() if r["to"] > r["from"])
    return min(max(1, int(offsets.get("r") or 1)), ranges)


#: a backlog at most this share over the worker's steered limit is read in one batch:
#: the batch after a full one would otherwise pay a whole batch's fixed cost (0.3-0.45 s
#: on a 2-core host) for the few records left over (bench/peer.py's backlog of 100 000
#: records in one transaction is 100 002 offsets, read as 99 999 and then 3). A batch
#: 10% over its steered duration stays well inside the time cut's 1.25x
#: (``worker.batch_size.TIME_CUT_SHARE``)
LEFTOVER_SHARE = 0.1


def batch_limit(backlog: int, ceiling: int | None, steered: int | None) -> int | None:
    """The most records a batch reads of ``backlog``: the worker's ``steered`` limit, or
    the whole backlog when it is at most :data:`LEFTOVER_SHARE` more, never over the
    user's ``ceiling`` (``maxOffsetsPerTrigger``). None: no limit."""
    if steered is not None and backlog <= steered * (1 + LEFTOVER_SHARE):
        steered = max(steered, backlog)
    limits = [n for n in (ceiling, steered) if n is not None]
    return min(limits) if limits else None


def _budget(available: Mapping[str, int], limit: int | None) -> dict[str, int]:
    """Records each partition may read this trigger: all, or ``limit`` split in
    proportion to what each has (at least one record each that has any)."""
    total = sum(available.values())
    if limit is None or total <= limit:
        return dict(available)
    return {k: min(n, max(1, n * limit // total)) if n else 0 for k, n in available.items()}


class KafkaStreamReader(DataSourceStreamReader):
    """Spark's side of the source: plans batches in the driver's source process, reads
    them in the executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = dict(options)
        self._plan_path = Path(options["plan"])
        given = options.get("kafka")
        self._kafka = (KafkaClientSettings.from_json(given) if given
                       else plain(options["bootstrap"]))
        raw = options.get("maxOffsetsPerTrigger") or ""
        self._limit = int(raw) if raw else None
        self._readers = max(1, int(options.get("readers") or 1))
        self._pacing = Pacing(int(options.get("batchGapMs") or 0) / 1000)
        self._admin: Any = None
        self._latest: dict[str, int] = {}  # each partition's end at the last trigger

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_admin"] = None  # not picklable; made where it is used
        return state

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's API)
        return {"v": 0, "p": {}}

    def latestOffset(self, start: dict[str, Any], limit: Any = None  # noqa: N802
                     ) -> dict[str, Any]:
        plan = read_plan(self._plan_path)
        if not self._pacing.due(plan.version, adds(plan, start.get("p", {}))):
            return start  # the gap since the last look not over, the plan unchanged
        self._pacing.looked(plan.version)
        before: dict[str, dict[str, int]] = start.get("p", {})
        keys = sorted(plan.partitions)
        ends = self._offsets(keys, "latest")
        self._latest = ends
        positions: dict[str, int] = {}
        restart = [k for k in keys if k not in before
                   or before[k]["g"] != plan.partitions[k].generation]
        earliest = self._offsets([k for k in restart
                                  if plan.partitions[k].start == EARLIEST], "earliest")
        for k in keys:
            if k in restart:
                raw = plan.partitions[k].start
                positions[k] = (earliest[k] if raw == EARLIEST else ends[k] if raw == LATEST
                                else int(raw))
            else:
                positions[k] = before[k]["to"]
        available = {k: max(0, ends[k] - positions[k]) for k in keys}
        budget = _budget(available, batch_limit(sum(available.values()), self._limit,
                                                plan.max_records))
        out = {k: {"from": positions[k], "to": positions[k] + budget[k],
                   "g": plan.partitions[k].generation} for k in keys}
        if set(out) == set(before) and all(
                v["from"] == v["to"] == before[k]["to"] and v["g"] == before[k]["g"]
                for k, v in out.items()):
            return start  # nothing new, nothing changed: no batch
        return {"v": plan.version, "r": self._readers, "p": out}

    def reportLatestOffset(self) -> dict[str, int] | None:  # noqa: N802
        """Each partition's end (last stable offset) at the last trigger, in the query's
        progress: what the worker measures its tasks' backlog against."""
        return dict(self._latest) or None

    def _offsets(self, keys: list[str], which: str) -> dict[str, int]:
        """The partitions' latest stable (read-committed) or earliest offsets."""
        if not keys:
            return {}
        from confluent_kafka import IsolationLevel, TopicPartition  # noqa: PLC0415
        from confluent_kafka.admin import (  # type: ignore[attr-defined]  # noqa: PLC0415
            AdminClient,
            OffsetSpec,
        )

        if self._admin is None:
            self._admin = AdminClient(self._kafka.client({"log_level": 3}))
        spec = (OffsetSpec.latest() if which == "latest"  # type: ignore[no-untyped-call]
                else OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        wanted = {TopicPartition(*split_key(k)): spec for k in keys}
        futures = self._admin.list_offsets(
            wanted, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=30)
        return {f"{tp.topic}/{tp.partition}": int(f.result().offset)
                for tp, f in futures.items()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[KafkaRead]:
        return reads_of(end, self._readers)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaRead)
        for r in partition.ranges:
            yield from read_range(self._kafka, r)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # Coxswain's checkpoints say where tasks start; nothing to keep here


def read_range(brokers: Brokers, r: KafkaRange, consumers: ConsumerPool | None = None
               ) -> Generator[Any, None, None]:
    """The records of ``r`` as Arrow record batches (in the executor's Python worker),
    read with a consumer of the process's pool (``worker.sources.kafka_consumers``)."""
    import pyarrow as pa  # type: ignore[import-untyped]  # noqa: PLC0415 (executor side)
    from confluent_kafka import TopicPartition  # noqa: PLC0415

    settle()
    bootstrap = settings_of(brokers)
    consumers = consumers or pool()
    consumer = consumers.take(bootstrap, r.topic, r.partition, r.start)
    # where the consumer is: past every record it handed out, even beyond ``r.end``
    # (the next batch of the partition goes on from there or assigns again)
    consumed = r.start
    try:
        tp = TopicPartition(r.topic, r.partition, r.start)
        position, stalled_since = r.start, time.monotonic()
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        offsets: list[int] = []
        stamps: list[int] = []
        while position < r.end:
            msgs = consumer.consume(num_messages=min(CHUNK, r.end - position),
                                    timeout=POLL_S)
            for m in msgs:
                err = m.error()
                if err is not None:
                    raise RuntimeError(f"reading {r.topic}[{r.partition}]: {err}")
                offset = m.offset() or 0  # (set on every consumed record)
                consumed = max(consumed, offset + 1)
                if offset >= r.end:
                    position = r.end
                    continue
                keys.append(m.key())
                values.append(m.value())
                offsets.append(offset)
                stamps.append(m.timestamp()[1])
                position = offset + 1
            if not msgs:  # markers or a compacted gap before ``end``: where are we now?
                found = consumer.position([tp])[0].offset
                position = max(position, found)
                consumed = max(consumed, found)
                if time.monotonic() - stalled_since > READ_STALL_S:
                    raise RuntimeError(f"{r.topic}[{r.partition}]: no record between "
                                       f"{position} and {r.end} for {READ_STALL_S:.0f}s")
            else:
                stalled_since = time.monotonic()
            if len(offsets) >= CHUNK or (position >= r.end and offsets):
                yield _batch(pa, r, keys, values, offsets, stamps)
                keys, values, offsets, stamps = [], [], [], []
    except BaseException:
        consumers.discard(consumer)  # where it stands is unknown: not kept
        raise
    consumers.give_back(bootstrap, r.topic, r.partition, consumer, consumed)


def _batch(pa: Any, r: KafkaRange, keys: list[bytes | None], values: list[bytes | None],
           offsets: list[int], stamps: list[int]) -> Any:
    """The records as one Arrow record batch, built column-wise (a datetime made per
    record took 2.7 us of a record's ~25 us here; this, 0.2 us)."""
    import numpy as np  # noqa: PLC0415 (executor side)

    n = len(offsets)
    return pa.RecordBatch.from_arrays([
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(r.topic, pa.string()), n),
        pa.repeat(pa.scalar(r.partition, pa.int32()), n), pa.array(offsets, pa.int64()),
        pa.array(np.asarray(stamps, dtype=np.int64) * 1000, pa.timestamp("us", tz="UTC")),
        pa.repeat(pa.scalar(r.gen, pa.int32()), n)],
        names=["key", "value", "topic", "partition", "offset", "timestamp", "gen"])


class KafkaDataSource(DataSource):
    """``spark.readStream.format("coxswain-kafka")`` with options ``plan`` (the path of
    the worker's ``worker.sources.source_plan``), ``bootstrap`` or ``kafka`` (every client
    setting, :meth:`KafkaClientSettings.to_json`) and ``maxOffsetsPerTrigger``
    (records per trigger over all partitions; default: no limit) and ``batchGapMs``
    (the least time between two looks at the broker's ends, but for a changed plan;
    default 0: every trigger)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> KafkaStreamReader:  # noqa: N802
        return KafkaStreamReader(self.options)


def kafka_stream(spark: Any, plan: Path, bootstrap: Brokers,
                 max_offsets_per_trigger: int | None = None, gap_s: float = 0.0) -> Any:
    """The streaming DataFrame of the partitions ``plan`` names (read by at most as many
    Spark tasks per batch as the application has cores; the input looked at at most once
    every ``gap_s``, :mod:`worker.sources.pacing`)."""
    spark.dataSource.register(KafkaDataSource)
    return (spark.readStream.format(NAME).option("plan", str(plan))
            .option("kafka", settings_of(bootstrap).to_json())
            .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger or ""))
            .option("readers", str(max(1, spark.sparkContext.defaultParallelism)))
            .option("batchGapMs", str(int(gap_s * 1000)))
            .load())


__all__ = ["NAME", "KafkaDataSource", "KafkaRange", "KafkaRead", "SourcePlan", "kafka_stream",
           "reads_of"]
