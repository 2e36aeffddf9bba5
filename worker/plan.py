"""What one worker's Structured Streaming query reads, keeps and commits, for one job
model version: pure functions from the API's JSON to Spark options and SQL.

* ``assign``: the partitions of the worker's active tasks.
* ``startingOffsets``: per partition, the smallest resolved start of its buckets (a
  bucket that got further skips the difference through its watermark).
* the key-bucket column, computed in Spark SQL exactly like ``grouping.key_bucket``:
  ``h(key) mod F`` with the job's key hash ``h`` (``config.keyHash``: Spark's ``xxhash64``
  or ``crc32``), a null key by ``offset mod F`` (F a power of two, so ``pmod``).
* a filter, evaluated in the JVM before any Python sees a row: records of buckets this
  worker does not own, records of a bucket below that bucket's own start, and records
  below a sub-bucket's skip watermark, are dropped.
* after a batch, the commit: every bucket of a partition advances to the batch's end
  offset of that partition, whether or not it had records.
* Kinesis inputs (``worker.sources.kinesis``): the same plan over shards, with offsets
  compared as zero-padded text, end-of-shard markers filtered out (they only make the
  batch's end ``endingSequenceNumber + 1``), and tasks whose parent shards' key spaces
  are not finished (``waitingFor``) left out until they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoint.model import MAX_OFFSET_DIGITS
from grouping.key_hash import LEGACY_KEY_HASH, KeyHash, key_hash_of, spark_sql

EARLIEST, LATEST = -2, -1  # Spark's startingOffsets codes


@dataclass(frozen=True, slots=True)
class SspStart:
    """One SSP(Kb) of a task and where it starts; ``generation``: the source generation
    of its partition from which its batches count (a task added where the partition was
    read past its start waits for the partition to be read again from there)."""

    task: str
    topic: str
    partition: int
    key_bucket: int  # -1: the whole partition
    start: int  # an offset, EARLIEST or LATEST
    generation: int = 0


@dataclass(frozen=True, slots=True)
class Skip:
    """Records of sub-bucket ``bucket`` under ``factor`` with offset below ``offset`` are
    done already."""

    topic: str
    partition: int
    factor: int
    bucket: int
    offset: int


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """Everything a query for one version needs.

    ``system`` is ``kafka`` (the JVM connector's columns: ``offset`` a bigint) or
    ``kinesis`` (``worker.sources.kinesis``: sequence numbers outgrow every Spark integer,
    so offsets are compared through ``offsetKey``, the number as zero-padded text, and
    end-of-shard markers never reach user code)."""

    version: int
    factor: int
    starts: tuple[SspStart, ...]
    skips: tuple[Skip, ...] = field(default=())
    system: str = "kafka"
    #: active tasks left out because a parent shard's key space is not finished yet
    waiting: tuple[str, ...] = field(default=())
    #: Kinesis: each shard's ending sequence number, when the job model's lineage has it
    endings: tuple[tuple[str, int, int], ...] = field(default=())
    #: the job's key hash (``config.keyHash``; models without it: crc32)
    key_hash: KeyHash = LEGACY_KEY_HASH

    def _offset(self) -> str:
        return "offsetKey" if self.system == "kinesis" else "offset"

    def _literal(self, offset: int) -> str:
        if self.system == "kinesis":
            return "'" + str(offset).zfill(MAX_OFFSET_DIGITS) + "'"
        return str(offset)

    def kinesis_shards(self) -> dict[str, dict[str, dict[str, Any]]]:
        """The Kinesis source's ``shards`` option per stream: shard partition -> its
        start (the earliest of its buckets) and ending sequence number (or None)."""
        endings = {(stream, p): e for stream, p, e in self.endings}
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for topic, per in self.starting_offsets().items():
            out[topic] = {p: {"start": {EARLIEST: "earliest", LATEST: "latest"}.get(
                start, str(start)), "ending": None if (topic, int(p)) not in endings
                else str(endings[(topic, int(p))])} for p, start in per.items()}
        return out

    def assign(self) -> dict[str, list[int]]:
        """Spark's ``assign`` option: topic -> partitions."""
        out: dict[str, set[int]] = {}
        for s in self.starts:
            out.setdefault(s.topic, set()).add(s.partition)
        return {t: sorted(ps) for t, ps in sorted(out.items())}

    def starting_offsets(self) -> dict[str, dict[str, int]]:
        """Spark's ``startingOffsets`` JSON: per partition the smallest start of its
        buckets (earliest wins over any offset; latest only if all are latest)."""
        out: dict[str, dict[str, int]] = {}
        for s in self.starts:
            per = out.setdefault(s.topic, {})
            key = str(s.partition)
            per[key] = s.start if key not in per else _earlier(per[key], s.start)
        return out

    def bucket_expr(self, factor: int | None = None) -> str:
        """Spark SQL for a record's key bucket under ``factor`` (default: the model's)."""
        f = factor or self.factor
        hashed = spark_sql(self.key_hash)
        if self.system == "kinesis":  # every record has a partition key (markers: none)
            return f"pmod({hashed}, {f})"
        return (f"CASE WHEN key IS NULL THEN pmod(offset, {f}) "
                f"ELSE pmod({hashed}, {f}) END")

    def task_sql(self) -> str:
        """Spark SQL naming the task of each kept record (after ``keyBucket``)."""
        cases = []
        for s in self.starts:
            cond = f"topic = {sql_string(s.topic)} AND partition = {s.partition}"
            if s.key_bucket >= 0:
                cond += f" AND keyBucket = {s.key_bucket}"
            cases.append(f"WHEN {cond} THEN {sql_string(s.task)}")
        return "CASE " + " ".join(cases) + " END"

    def filter_sql(self) -> str:
        """Spark SQL keeping only owned buckets, each from its own start (the partition is
        read from the earliest of them), and nothing below a skip watermark."""
        whole: set[tuple[str, int]] = set()
        buckets: dict[tuple[str, int], dict[int, int]] = {}
        for s in self.starts:
            if s.key_bucket < 0:
                whole.add((s.topic, s.partition))
            else:
                buckets.setdefault((s.topic, s.partition), {})[s.key_bucket] = s.start
        keep = []
        for topic, p in sorted(whole | set(buckets)):
            where = f"(topic = {sql_string(topic)} AND partition = {p}"
            if (topic, p) not in whole:
                # A bucket that got further than another of the same partition must not
                # read again from the other's start: its records below its own start were
                # processed and committed (e.g. by this worker, before it also took over a
                # slower bucket of the partition).
                mine = buckets[(topic, p)]
                anywhere = sorted(b for b, start in mine.items() if start < 0)
                parts = [f"keyBucket IN ({', '.join(map(str, anywhere))})"] if anywhere else []
                parts += [f"(keyBucket = {b} AND {self._offset()} >= {self._literal(start)})"
                          for b, start in sorted(mine.items()) if start >= 0]
                where += " AND (" + " OR ".join(parts) + ")"
            keep.append(where + ")")
        sql = "(" + (" OR ".join(keep) or "false") + ")"
        if self.system == "kinesis":
            sql = f"NOT endOfShard AND {sql}"
        for w in self.skips:
            sql += (f" AND NOT (topic = {sql_string(w.topic)} AND partition = {w.partition} AND "
                    f"{self.bucket_expr(w.factor)} = {w.bucket} AND "
                    f"{self._offset()} < {self._literal(w.offset)})")
        return sql

    def commit(self, end_offsets: Mapping[tuple[str, int], int],
               left: Mapping[tuple[str, str, int], int] | None = None) -> dict[str, Any]:
        """``checkpoints`` of ``POST /checkpoints``: every SSP(Kb) of a partition the batch
        read advances to that partition's end (the next offset to read), or, in a batch
        cut short (``worker.cuts``), to the first offset its task ``left`` there."""
        out: dict[str, Any] = {}
        for s in self.starts:
            end = end_offsets.get((s.topic, s.partition))
            if end is not None and left:
                end = min(end, left.get((s.task, s.topic, s.partition), end))
            if end is None or end <= s.start:
                continue  # not read, or read again below where this key space was
            ssp: dict[str, Any] = {"system": self.system, "stream": s.topic,
                                   "partition": s.partition}
            if s.key_bucket >= 0:
                ssp["keyBucket"] = s.key_bucket
            out.setdefault(s.task, {"inputOffsets": []})["inputOffsets"].append(
                {"ssp": ssp, "offset": str(end)})
        return out


def plan_query(model: Mapping[str, Any], processor_id: str,
               checkpoints: Mapping[str, Any]) -> QueryPlan:
    """The plan of ``processor_id`` for a job model (API JSON) and the resolved
    checkpoints of its active tasks (``GET /checkpoints`` JSON)."""
    container = model["containers"].get(processor_id, {"tasks": {}})
    factor = int(model["config"].get("elasticityFactor", 1))
    starts: list[SspStart] = []
    skips: list[Skip] = []
    waiting: list[str] = []
    active = {name: task for name, task in sorted(container["tasks"].items())
              if task.get("taskMode", "Active") == "Active"}
    systems = {ssp.get("system", "kafka") for t in active.values()
               for ssp in t["systemStreamPartitions"]}
    if len(systems) > 1:
        raise ValueError(f"a worker's query reads one system; this job mixes {sorted(systems)}")
    system = systems.pop() if systems else "kafka"
    if system not in ("kafka", "kinesis"):
        raise ValueError(f"input system {system!r}: the worker reads kafka and kinesis")
    for name, task in active.items():
        if checkpoints.get(name, {}).get("waitingFor"):
            waiting.append(name)  # a parent shard's key space is not finished yet
            continue
        resolved = {ssp_key(o["ssp"]): o["offset"]
                    for o in checkpoints.get(name, {}).get("inputOffsets", [])}
        for ssp in task["systemStreamPartitions"]:
            raw = resolved.get(ssp_key(ssp), "earliest")
            starts.append(SspStart(name, ssp["stream"], int(ssp["partition"]),
                                   int(ssp.get("keyBucket", -1)), _offset(raw)))
        for w in checkpoints.get(name, {}).get("skipBelow", []):
            offset = _offset(w["offset"])
            if offset >= 0:
                skips.append(Skip(w["ssp"]["stream"], int(w["ssp"]["partition"]),
                                  int(w["elasticityFactor"]), int(w["keyBucket"]), offset))
    endings = tuple(
        (name.partition(".")[2], int(p), int(shard["endingSequenceNumber"]))
        for name, shards in (model["config"].get("shards") or {}).items()
        for p, shard in shards.items() if shard.get("endingSequenceNumber") is not None)
    # a closed shard's key spaces committed at their end are finished: nothing to read
    ended = {(stream, p): e + 1 for stream, p, e in endings}
    starts = [s for s in starts if s.start < ended.get((s.topic, s.partition), s.start + 1)]
    return QueryPlan(int(model["version"]), factor, tuple(starts), tuple(skips), system,
                     tuple(waiting), endings, key_hash_of(model["config"]))


def ssp_key(ssp: Mapping[str, Any]) -> tuple[str, int, int]:
    """An input's identity in a checkpoint body: (stream, partition, key bucket)."""
    return (ssp["stream"], int(ssp["partition"]), int(ssp.get("keyBucket", -1)))


def _offset(raw: str) -> int:
    if raw == "earliest":
        return EARLIEST
    if raw == "latest":
        return LATEST
    return int(raw)


def _earlier(a: int, b: int) -> int:
    if EARLIEST in (a, b):
        return EARLIEST
    if a == LATEST:
        return b
    if b == LATEST:
        return a
    return min(a, b)


def sql_string(s: str) -> str:
    """A Spark SQL string literal."""
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"
