"""A Kinesis source for Spark Structured Streaming (PySpark's Python data source API).

Spark has no Kinesis source in Structured Streaming, so this is one, for the shards of one
processor's query. Offsets are per shard, each the next offset to read: ``earliest`` (the
trim horizon), ``ts:<millis>`` (what ``latest`` becomes at the query's start, so records
arriving between two triggers are not skipped) or a decimal sequence number plus one. A
trigger reads each shard from there with GetShardIterator (AFTER_SEQUENCE_NUMBER of the
last record read, TRIM_HORIZON, AT_TIMESTAMP) and GetRecords, up to a per-shard limit,
backing off when Kinesis throttles. Shard iterators are kept between triggers (Kinesis
allows five GetShardIterator calls per shard and second).

A shard read to its end (GetRecords answers no next iterator) yields one **end marker**:
a row with ``endOfShard`` true and the shard's ending sequence number, so the batch's end
for that shard is ``endingSequenceNumber + 1`` and the worker commits exactly that for
every key bucket of the shard: how the coordinator learns the shard is finished
(``checkpoint.shard_ends``). Markers are dropped before any user code sees a row.

Each batch has one Spark input partition per shard (``DataSourceStreamReader``); how a
batch's end is found without reading every record twice is on
:class:`KinesisStreamReader`. A batch replayed after a failure reads its shard ranges
again, exactly.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from checkpoint.model import MAX_OFFSET_DIGITS
from grouping.shards import shard_id, shard_partition
from worker.sources.pacing import Pacing, adds
from worker.sources.source_plan import read_plan

log = logging.getLogger("coxswain.kinesis")

NAME = "coxswain-kinesis"
SCHEMA = ("key binary, value binary, topic string, partition int, shard string, "
          "sequenceNumber string, offsetKey string, approximateArrivalTimestamp timestamp, "
          "endOfShard boolean, gen int")
EARLIEST = "earliest"
Row = tuple[bytes | None, bytes | None, str, int, str, str, str, dt.datetime | None, bool]


def offset_key(sequence: int) -> str:
    """A sequence number as text that sorts as the number does (Spark SQL compares
    these: sequence numbers outgrow every Spark integer type)."""
    return str(sequence).zfill(MAX_OFFSET_DIGITS)


@dataclass(frozen=True, slots=True)
class ShardRead:
    """What one shard gave in one read."""

    rows: list[Row]
    next_offset: str  # the shard's offset after these rows
    ended: bool


class ShardReader:
    """Reads shards of one stream with a Kinesis client (boto3's)."""

    def __init__(self, client: Any, stream: str, endings: Mapping[int, int | None],
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._client = client
        self._stream = stream
        self._endings = dict(endings)  # shard -> ending sequence number, when known
        self._sleep = sleep
        self._iterators: dict[int, tuple[str, str]] = {}  # shard -> (offset, iterator)
        # the backlog, per shard: how far the last read is behind the shard's tip
        # (GetRecords' MillisBehindLatest) and the records/s that arrived in what it read
        self.behind_ms: dict[int, int] = {}
        self.arrival_rate: dict[int, float] = {}

    def ended(self, partition: int, ending: int) -> None:
        """``partition`` is closed at ``ending`` (as the job model's lineage says)."""
        self._endings[partition] = ending

    def read(self, partition: int, start: str, limit: int, until: int | None = None
             ) -> ShardRead:
        """Up to ``limit`` records of shard ``partition`` from offset ``start`` (all of
        them below ``until``, when given: a replay)."""
        ending = self._endings.get(partition)
        if start.isdigit() and ending is not None and int(start) > ending:
            return ShardRead([], start, True)  # finished before
        iterator = self._iterator(partition, start)
        rows: list[Row] = []
        offset = start
        while iterator is not None and len(rows) < limit:
            try:
                out = self._call(functools.partial(
                    self._client.get_records, ShardIterator=iterator,
                    Limit=min(10_000, limit - len(rows))))
            except Exception as e:
                if _code(e) != "ExpiredIteratorException":
                    raise
                # a kept iterator outlived its 5 minutes (a stalled query): a new one
                self._iterators.pop(partition, None)
                iterator = self._iterator(partition, offset)
                continue
            if until is None:  # a replay reads the past: no backlog measure
                self._measure(partition, out)
            for r in out["Records"]:
                seq = int(r["SequenceNumber"])
                if until is not None and seq >= until:
                    return ShardRead(rows, offset, False)
                rows.append((r["PartitionKey"].encode(), bytes(r["Data"]), self._stream,
                             partition, shard_id(partition), r["SequenceNumber"],
                             offset_key(seq), r.get("ApproximateArrivalTimestamp"), False))
                offset = str(seq + 1)
            iterator = out.get("NextShardIterator")
            if iterator is not None:
                self._iterators[partition] = (offset, iterator)
            if not out["Records"] and (out.get("MillisBehindLatest", 0) == 0 or until is None):
                break  # caught up (an open shard gives empty pages forever)
        if iterator is not None and (until is None or not self._ends_at(partition, until)):
            return ShardRead(rows, offset, False)
        # ended: no next iterator, or a replay of a batch that ended at the shard's end
        # (its end marker's): Kinesis may hand out one more empty page of a closed shard
        self._iterators.pop(partition, None)
        self.behind_ms[partition] = 0  # ended: nothing behind
        ending = self._ending(partition)
        rows.append((None, None, self._stream, partition, shard_id(partition), str(ending),
                     offset_key(ending), None, True))
        return ShardRead(rows, str(ending + 1), True)

    def _measure(self, partition: int, page: Mapping[str, Any]) -> None:
        """The backlog of ``partition`` after reading ``page``."""
        behind = page.get("MillisBehindLatest")
        if behind is not None:
            self.behind_ms[partition] = int(behind)
        stamps = [r["ApproximateArrivalTimestamp"] for r in page["Records"]
                  if r.get("ApproximateArrivalTimestamp") is not None]
        if len(stamps) >= 2:
            span = (max(stamps) - min(stamps)).total_seconds()
            if span > 0:
                self.arrival_rate[partition] = (len(stamps) - 1) / span

    def backlog(self, partition: int) -> dict[str, int]:
        """``millisBehindLatest`` of the last read of ``partition``, and the records that
        are behind as estimated from it and the rate records arrived at in what was read
        (Kinesis tells no count)."""
        behind = self.behind_ms.get(partition)
        if behind is None:
            return {}
        out = {"millisBehindLatest": behind}
        rate = self.arrival_rate.get(partition)
        if rate is not None or behind == 0:
            out["recordsBehind"] = round((rate or 0.0) * behind / 1000)
        return out

    def _iterator(self, partition: int, start: str) -> str | None:
        cached = self._iterators.get(partition)
        if cached is not None and cached[0] == start:
            return cached[1]
        args: dict[str, Any] = {"StreamName": self._stream, "ShardId": shard_id(partition)}
        if start == EARLIEST:
            args["ShardIteratorType"] = "TRIM_HORIZON"
        elif start.startswith("ts:"):
            args.update(ShardIteratorType="AT_TIMESTAMP",
                        Timestamp=dt.datetime.fromtimestamp(int(start[3:]) / 1000, dt.UTC))
        else:  # the next offset to read: after the last record read
            args.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER",
                        StartingSequenceNumber=str(int(start) - 1))
        out = self._call(functools.partial(self._client.get_shard_iterator, **args))
        found: str | None = out.get("ShardIterator")
        return found

    def _ends_at(self, partition: int, end: int) -> bool:
        """Whether ``end`` is the end of ``partition`` (its ending sequence number + 1):
        a batch that read it to the end."""
        try:
            return end == self._ending(partition) + 1
        except RuntimeError:
            return False  # still open

    def _ending(self, partition: int) -> int:
        """The ending sequence number of a shard that ended (from the job model's lineage,
        or from ListShards when the shard closed after that model was made)."""
        known = self._endings.get(partition)
        if known is not None:
            return known
        token: str | None = None
        while True:
            page = self._call(
                functools.partial(self._client.list_shards, NextToken=token) if token
                else functools.partial(self._client.list_shards, StreamName=self._stream))
            for s in page.get("Shards", []):
                ending = s.get("SequenceNumberRange", {}).get("EndingSequenceNumber")
                if ending is not None:
                    self._endings[shard_partition(s["ShardId"])] = int(ending)
            token = page.get("NextToken")
            if partition in self._endings:
                return int(self._endings[partition])  # type: ignore[arg-type]
            if not token:
                raise RuntimeError(f"shard {shard_id(partition)} of {self._stream} ended "
                                   "but ListShards gives it no ending sequence number")

    def _call(self, fn: Callable[[], Any]) -> Any:
        """``fn`` again after a throttling answer, backing off up to 2 s."""
        delay = 0.1
        while True:
            try:
                return fn()
            except Exception as e:  # botocore's ClientError, without importing botocore
                code = _code(e)
                if code not in ("ProvisionedThroughputExceededException",
                                "LimitExceededException", "ThrottlingException"):
                    raise
                log.info("Kinesis throttled (%s): retrying in %.1fs", code, delay)
                self._sleep(delay)
                delay = min(2.0, delay * 2)


def _code(error: Exception) -> str | None:
    """The error code of a botocore ClientError (None for anything else)."""
    code = getattr(error, "response", {}).get("Error", {}).get("Code")
    return None if code is None else str(code)


def _client(options: Mapping[str, str]) -> Any:
    import boto3  # noqa: PLC0415 (in the source's own Python process)

    return boto3.client("kinesis", endpoint_url=options.get("endpoint") or None,
                        region_name=options.get("region") or "us-east-1")


@dataclass
class ShardRange(InputPartition):
    """One Spark input partition: the records of one shard from ``start`` (an offset) to
    ``end`` (exclusive), and those records when the driver already has them; ``gen``:
    the shard's source generation (``worker.sources.source_plan``), a column of every row."""

    partition: int
    start: str
    end: str
    rows: list[Row] | None = None
    gen: int = 0


class KinesisStreamReader(DataSourceStreamReader):
    """Spark's side of :class:`ShardReader`: one input partition per shard and batch,
    for the shards the worker's source plan names (``worker.sources.source_plan``, read at every
    trigger: shards join and leave the query as its tasks do).

    Kinesis tells no shard's latest sequence number without reading its records, so the
    end of a batch is found by reading: ``latestOffset`` reads each shard from the batch's
    start (up to ``maxRecordsPerShard``) in the driver's source process and keeps the
    records for ``partitions``, which hands each shard's to its own input partition;
    reading everything twice (once to fix the end, once in the task) would halve what
    Kinesis's per-shard read limits allow. A batch replayed after a restart has no
    records kept: its tasks read their shard range from Kinesis (exactly: up to the
    batch's end).

    Offsets: ``{"v": plan version, "p": {shard: {"from", "to", "g"}}}`` (shard: its
    partition number as text; ``from``/``to`` as :class:`ShardReader` takes them)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._stream = options["stream"]
        self._plan_path = Path(options["plan"])
        self._limit = int(options.get("maxRecordsPerShard", "10000"))
        self._pacing = Pacing(int(options.get("batchGapMs") or 0) / 1000)
        self._options = dict(options)
        self._shard_reader: ShardReader | None = None
        # read ahead, not yet planned: (shard, from, to, generation) -> rows
        self._kept: dict[tuple[int, str, str, int], list[Row]] = {}

    @property
    def _reader(self) -> ShardReader:
        # made where it is used: Spark pickles this reader, a boto3 client does not pickle
        if self._shard_reader is None:
            self._shard_reader = ShardReader(_client(self._options), self._stream, {})
        return self._shard_reader

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_shard_reader"], state["_kept"] = None, {}
        return state

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 (Spark's API)
        return {"v": 0, "p": {}}

    def latestOffset(self, start: dict[str, Any], limit: Any = None  # noqa: N802
                     ) -> dict[str, Any]:
        plan = read_plan(self._plan_path)
        if not self._pacing.due(plan.version, adds(plan, start.get("p", {}))):
            return start  # the gap since the last read not over, the plan unchanged
        self._pacing.looked(plan.version)
        before: dict[str, dict[str, Any]] = start.get("p", {})
        out: dict[str, dict[str, Any]] = {}
        # read ahead for a batch never planned (the plan changed since): gone
        self._kept = {k: v for k, v in self._kept.items() if str(k[0]) in plan.partitions}
        for key, ps in sorted(plan.partitions.items()):
            p = int(key)
            if ps.ending is not None:
                self._reader.ended(p, ps.ending)
            prev = before.get(key)
            if prev is None or prev["g"] != ps.generation:
                offset = f"ts:{int(time.time() * 1000)}" if ps.start == "latest" else ps.start
            else:
                offset = str(prev["to"])
            got = self._reader.read(p, offset, self._limit)
            if got.rows:
                self._kept[(p, offset, got.next_offset, ps.generation)] = got.rows
            out[key] = {"from": offset, "to": got.next_offset, "g": ps.generation}
        if set(out) == set(before) and all(
                v["from"] == v["to"] == before[k]["to"] and v["g"] == before[k]["g"]
                for k, v in out.items()):
            return start  # nothing new, nothing changed: no batch
        return {"v": plan.version, "p": out}

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:  # noqa: N802
        """The backlog per shard, in the query's progress (``sources[0].latestOffset``):
        what the worker reports as each task's consumer lag (Kinesis tells no shard's
        latest sequence number, so this is the backlog, not an offset)."""
        if self._shard_reader is None:
            return None
        plan = read_plan(self._plan_path)
        return {k: found for k in plan.partitions
                if (found := self._shard_reader.backlog(int(k)))}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[ShardRange]:
        out = []
        for key, r in sorted(end.get("p", {}).items()):
            if r["to"] == r["from"]:
                continue
            p, gen = int(key), int(r["g"])
            out.append(ShardRange(p, str(r["from"]), str(r["to"]),
                                  self._kept.pop((p, str(r["from"]), str(r["to"]), gen),
                                                 None), gen))
        return out

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, ShardRange)
        if partition.rows is not None:
            rows = partition.rows
        elif not partition.end.isdigit():
            rows = []
        else:  # a replay: this shard range again from Kinesis, exactly to the batch's end
            rows = self._reader.read(partition.partition, partition.start, 2**31,
                                     until=int(partition.end)).rows
        return iter([(*row, partition.gen) for row in rows])

    def commit(self, end: dict[str, Any]) -> None:
        # records read for a batch that was never planned (Spark asked for the latest
        # offset again) are dropped: of a shard this batch read, only a read starting
        # where it ended may still be planned; a shard it did not read (one that joined
        # since) keeps what was read ahead for it
        ends = {int(k): (str(r["to"]), int(r["g"])) for k, r in end.get("p", {}).items()}
        self._kept = {k: v for k, v in self._kept.items()
                      if k[0] not in ends or (k[1], k[3]) == ends[k[0]]}


class KinesisDataSource(DataSource):
    """``spark.readStream.format("coxswain-kinesis")`` with options ``stream``,
    ``endpoint``, ``region``, ``plan`` (the path of the worker's
    ``worker.sources.source_plan``: shard partitions, their starts and endings),
    ``maxRecordsPerShard`` (per trigger, 10000) and ``batchGapMs`` (the least time
    between two reads of the shards, but for a changed plan; default 0). Credentials:
    the usual AWS variables."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> KinesisStreamReader:  # noqa: N802
        return KinesisStreamReader(self.options)
