"""Checkpoint store on SQL (SQLite or PostgreSQL) via SQLAlchemy Core.

``checkpoint_entries`` keeps one row per key space (partition, factor, bucket) with the
next offset to read, the checkpoint id, job model version and processor of the last commit
that moved it. A commit is one transaction of monotonic upserts (an offset never moves
backwards). ``task_checkpoints`` keeps the v2 part of each task's last checkpoint (id and
state checkpoint markers, and the job model version of that commit);
``task_key_spaces`` which task last wrote v2 metadata for each key space (how a task
finds the snapshots of the tasks it was split from or merged from);
``partition_resets`` the reset policy an operator set for a partition whose entries
were cleared.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Double,
    Engine,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    delete,
    func,
    select,
    tuple_,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError

from checkpoint.commit import EntryKey, EntryRow, TaskPosition, bucket_key
from checkpoint.errors import CheckpointError
from checkpoint.model import BucketKey, ResetPolicy, TaskCheckpointMeta
from checkpoint.resolution import dominated
from checkpoint.store.offsets import SortableOffset, encode_offset
from grouping.model import SystemStreamPartition

T = TypeVar("T")

metadata = MetaData()

checkpoint_entries = Table(
    "checkpoint_entries",
    metadata,
    Column("system", String(255), primary_key=True),
    Column("stream", String(255), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("factor", Integer, primary_key=True),
    Column("bucket", Integer, primary_key=True),
    Column("offset", SortableOffset, nullable=False),  # exact up to 128 digits
    Column("checkpoint_id", String(64)),
    Column("job_model_version", BigInteger, nullable=False),
    Column("processor_id", String(255), nullable=False),
    Column("updated_at", Double, nullable=False),
)

task_checkpoints = Table(
    "task_checkpoints",
    metadata,
    Column("task_name", String(512), primary_key=True),
    Column("checkpoint_id", String(64)),
    Column("state_checkpoint_markers", Text, nullable=False),
    Column("job_model_version", BigInteger, nullable=False),
    Column("processor_id", String(255), nullable=False),
    Column("updated_at", Double, nullable=False),
)

task_key_spaces = Table(
    "task_key_spaces",
    metadata,
    Column("system", String(255), primary_key=True),
    Column("stream", String(255), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("factor", Integer, primary_key=True),
    Column("bucket", Integer, primary_key=True),
    Column("task_name", String(512), nullable=False),
)

_ENTRY_COLUMNS = ("system", "stream", "partition", "factor", "bucket", "offset",
                  "checkpoint_id", "job_model_version", "processor_id", "updated_at")

partition_resets = Table(
    "partition_resets",
    metadata,
    Column("system", String(255), primary_key=True),
    Column("stream", String(255), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("policy", String(16), nullable=False),
    Column("updated_at", Double, nullable=False),
)


class CheckpointStoreUnavailable(CheckpointError):
    """The checkpoint database cannot be reached."""

    code = "store_unavailable"


@dataclass(frozen=True, slots=True)
class CommitResult:
    """How many entries a commit moved forward (the rest were already at or past it), and
    the tasks whose v2 metadata was not written because a newer checkpoint of theirs is
    stored (a late commit)."""

    advanced: int
    unchanged: int
    stale_tasks: tuple[str, ...] = ()


class SqlCheckpointStore:
    """Per-key-bucket checkpoint entries with monotonic commits."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name

    def read_entries(self, partitions: Iterable[SystemStreamPartition]) -> dict[BucketKey, int]:
        """Every stored entry of the given (whole) partitions."""
        keys = [BucketKey(p.whole(), 1, 0) for p in partitions]
        if not keys:
            return {}
        with self._connect() as conn:
            return self._offsets(conn, keys)

    def read_resets(
        self, partitions: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, ResetPolicy]:
        """Reset policies operators set for the given partitions."""
        wanted = {p.whole() for p in partitions}
        if not wanted:
            return {}
        t = partition_resets
        with self._connect() as conn:
            rows = conn.execute(select(t.c.system, t.c.stream, t.c.partition, t.c.policy))
            found = {SystemStreamPartition(r.system, r.stream, r.partition): ResetPolicy(r.policy)
                     for r in rows}
        return {p: policy for p, policy in found.items() if p in wanted}

    def read_task_meta(self, task_names: Iterable[str]) -> dict[str, TaskCheckpointMeta]:
        """The v2 metadata of the last checkpoint of each named task that has one."""
        names = sorted(set(task_names))
        if not names:
            return {}
        t = task_checkpoints
        out: dict[str, TaskCheckpointMeta] = {}
        with self._connect() as conn:
            for chunk in _chunks(names, 500):
                for r in conn.execute(select(t.c.task_name, t.c.checkpoint_id,
                                             t.c.state_checkpoint_markers,
                                             t.c.job_model_version)
                                      .where(t.c.task_name.in_(chunk))):
                    out[r.task_name] = TaskCheckpointMeta(
                        r.checkpoint_id, json.loads(r.state_checkpoint_markers),
                        int(r.job_model_version))
        return out

    def read_state_holders(self, partitions: Iterable[SystemStreamPartition]
                           ) -> dict[str, list[EntryKey]]:
        """Per task that last wrote v2 metadata for some key space of ``partitions``:
        those key spaces."""
        wanted = {(p.system, p.stream, p.partition) for p in partitions}
        if not wanted:
            return {}
        k = task_key_spaces
        out: dict[str, list[EntryKey]] = {}
        with self._connect() as conn:
            for system, stream in {(s, st) for s, st, _ in wanted}:
                numbers = sorted(p for s, st, p in wanted if (s, st) == (system, stream))
                for chunk in _chunks(numbers, 500):
                    for r in conn.execute(select(k).where(and_(
                            k.c.system == system, k.c.stream == stream,
                            k.c.partition.in_(chunk)))):
                        out.setdefault(r.task_name, []).append(
                            (r.system, r.stream, r.partition, r.factor, r.bucket))
        return out

    def read_all_task_meta(self) -> dict[str, TaskCheckpointMeta]:
        """The v2 metadata of every task's last checkpoint, tasks of older job models
        included (the blob store's collector keeps what any of them names)."""
        t = task_checkpoints
        with self._connect() as conn:
            rows = conn.execute(select(t.c.task_name, t.c.checkpoint_id,
                                       t.c.state_checkpoint_markers)).all()
        return {r.task_name: TaskCheckpointMeta(r.checkpoint_id,
                                                json.loads(r.state_checkpoint_markers))
                for r in rows}

    def commit(
        self,
        entries: Mapping[BucketKey, int],
        task_meta: Mapping[str, TaskCheckpointMeta],
        *,
        job_model_version: int,
        processor_id: str,
        checkpoint_ids: Mapping[BucketKey, str | None] | None = None,
    ) -> CommitResult:
        """Write a commit in one transaction; an entry only ever moves forward. The
        metadata of each task in ``task_meta`` belongs to all of ``entries`` (a commit of
        one task; the service's commits name each task's own entries, see ``write``)."""
        ids = checkpoint_ids or {}
        rows: list[EntryRow] = sorted(
            (k.ssp.system, k.ssp.stream, k.ssp.partition, k.factor, k.bucket, o, ids.get(k))
            for k, o in entries.items())
        position: TaskPosition = [(row[:5], row[5]) for row in rows]
        return self.write(rows, task_meta, {name: position for name in task_meta},
                          job_model_version=job_model_version, processor_id=processor_id)

    def write(
        self,
        rows: Sequence[EntryRow],
        task_meta: Mapping[str, TaskCheckpointMeta],
        positions: Mapping[str, TaskPosition],
        *,
        job_model_version: int,
        processor_id: str,
    ) -> CommitResult:
        """``commit`` for rows already checked by ``checkpoint.commit.build_commit`` (one
        row per key space, sorted by key).

        A task's v2 metadata (checkpoint id, state checkpoint markers) is written only when,
        after this commit's entries, the stored offsets of its ``positions`` are exactly the
        ones it names: a late commit (offsets behind the stored ones) must not pair an older
        snapshot with newer offsets. Both are judged and written in one transaction; the
        entries' row locks (PostgreSQL) or the write lock (SQLite) order it against a
        concurrent commit of the same task."""
        now = time.time()
        with self._begin() as conn:
            advanced = (self._upsert_monotonic(conn, rows, job_model_version, processor_id, now)
                        if rows else 0)
            current, stale = self._at_head(conn, task_meta, positions)
            meta_rows = [
                {"task_name": name, "checkpoint_id": m.checkpoint_id,
                 "state_checkpoint_markers": json.dumps(
                     {b: dict(s) for b, s in m.state_checkpoint_markers.items()},
                     sort_keys=True),
                 "job_model_version": job_model_version, "processor_id": processor_id,
                 "updated_at": now}
                for name, m in sorted(current.items())
            ]
            if meta_rows:
                t2 = task_checkpoints
                stmt2 = self._insert(t2)
                stmt2 = stmt2.on_conflict_do_update(
                    index_elements=[t2.c.task_name],
                    set_={c: stmt2.excluded[c] for c in (
                        "checkpoint_id", "state_checkpoint_markers", "job_model_version",
                        "processor_id", "updated_at")},
                )
                conn.execute(stmt2, meta_rows)
                k = task_key_spaces
                space_rows = [{"system": key[0], "stream": key[1], "partition": key[2],
                               "factor": key[3], "bucket": key[4], "task_name": name}
                              for name in sorted(current) for key, _ in positions[name]]
                stmt3 = self._insert(k)
                stmt3 = stmt3.on_conflict_do_update(
                    index_elements=[k.c.system, k.c.stream, k.c.partition, k.c.factor,
                                    k.c.bucket],
                    set_={"task_name": stmt3.excluded.task_name})
                conn.execute(stmt3, space_rows)
        return CommitResult(advanced, len(rows) - advanced, stale)

    def _at_head(
        self, conn: Connection, task_meta: Mapping[str, TaskCheckpointMeta],
        positions: Mapping[str, TaskPosition],
    ) -> tuple[dict[str, TaskCheckpointMeta], tuple[str, ...]]:
        """The metadata whose task's offsets are the stored ones, and the stale tasks."""
        if not task_meta:
            return {}, ()
        missing = [name for name in task_meta if not positions.get(name)]
        if missing:
            raise CheckpointError(f"v2 metadata of {missing} comes without input offsets")
        keys: dict[EntryKey, BucketKey] = {key: bucket_key(key) for name in task_meta
                                           for key, _ in positions[name]}
        stored = self._offsets(conn, keys.values())
        current: dict[str, TaskCheckpointMeta] = {}
        stale: list[str] = []
        for name, meta in task_meta.items():
            if all(stored.get(keys[key]) == offset for key, offset in positions[name]):
                current[name] = meta
            else:
                stale.append(name)
        return current, tuple(sorted(stale))

    def hash_dependent_entries(self) -> int:
        """How many entries depend on the job's key hash: offsets and state holders of
        key buckets under a factor above 1 (under factor 1 a bucket holds every key)."""
        with self._connect() as conn:
            return sum(int(conn.execute(select(func.count()).select_from(t).where(
                t.c.factor > 1)).scalar_one()) for t in (checkpoint_entries, task_key_spaces))

    def reset(self, partition: SystemStreamPartition, offset: int | ResetPolicy) -> None:
        """Forget every entry of ``partition`` and start it at ``offset`` (admin only:
        the one way an offset moves backwards)."""
        p = partition.whole()
        t, r = checkpoint_entries, partition_resets
        where = and_(t.c.system == p.system, t.c.stream == p.stream, t.c.partition == p.partition)
        now = time.time()
        with self._begin() as conn:
            conn.execute(delete(t).where(where))
            conn.execute(delete(r).where(and_(r.c.system == p.system, r.c.stream == p.stream,
                                              r.c.partition == p.partition)))
            if isinstance(offset, ResetPolicy):
                conn.execute(r.insert().values(system=p.system, stream=p.stream,
                                               partition=p.partition, policy=offset.value,
                                               updated_at=now))
            else:
                conn.execute(t.insert().values(
                    system=p.system, stream=p.stream, partition=p.partition, factor=1,
                    bucket=0, offset=offset, checkpoint_id=None, job_model_version=0,
                    processor_id="admin-reset", updated_at=now))

    def forget(self, partitions: Iterable[SystemStreamPartition]) -> int:
        """Delete everything kept per key space of ``partitions`` (entries, which tasks
        held their state, resets), in one transaction: partitions that are gone for good,
        such as Kinesis shards trimmed after retention. Returns how many entries."""
        wanted = sorted({p.whole() for p in partitions})
        removed = 0
        with self._begin() as conn:
            for table in (checkpoint_entries, task_key_spaces, partition_resets):
                for chunk in _chunks(wanted, 500):
                    result = conn.execute(delete(table).where(
                        tuple_(table.c.system, table.c.stream, table.c.partition).in_(
                            [(p.system, p.stream, p.partition) for p in chunk])))
                    if table is checkpoint_entries:
                        removed += result.rowcount
        return removed

    def collect_garbage(self, partitions: Iterable[SystemStreamPartition]) -> int:
        """Delete dominated entries of the given partitions; returns how many."""
        entries = self.read_entries(partitions)
        doomed = dominated(entries)
        if not doomed:
            return 0
        t = checkpoint_entries
        with self._begin() as conn:
            for k in doomed:
                # Only while it still has the offset we judged: a concurrent commit may have
                # moved it, and then it may no longer be dominated.
                conn.execute(delete(t).where(and_(
                    t.c.system == k.ssp.system, t.c.stream == k.ssp.stream,
                    t.c.partition == k.ssp.partition, t.c.factor == k.factor,
                    t.c.bucket == k.bucket, t.c.offset == entries[k])))
        return len(doomed)

    def ping(self) -> None:
        """Raise if the database is unreachable."""
        with self._connect() as conn:
            conn.execute(select(1))

    # -- helpers

    def _upsert_monotonic(
        self, conn: Connection, rows: Sequence[EntryRow], job_model_version: int,
        processor_id: str, now: float,
    ) -> int:
        """Insert or move forward every row; returns how many changed (a row whose offset
        would not advance is left alone and not counted).

        Written at the driver level: at 1000 rows per commit, SQLAlchemy's per-row
        parameter handling costs more than the database's work. PostgreSQL gets one
        statement over arrays (one round trip); SQLite, which runs in-process, executemany.
        """
        quoted = ", ".join(f'"{c}"' for c in _ENTRY_COLUMNS)  # "offset" is reserved in PG
        upsert = (
            'ON CONFLICT (system, stream, partition, factor, bucket) DO UPDATE SET '
            '"offset" = excluded."offset", checkpoint_id = excluded.checkpoint_id, '
            'job_model_version = excluded.job_model_version, '
            'processor_id = excluded.processor_id, updated_at = excluded.updated_at '
            'WHERE checkpoint_entries."offset" < excluded."offset"'
        )
        raw = conn.connection.driver_connection
        assert raw is not None
        # below SQLAlchemy, so offsets are encoded here as SortableOffset would
        encoded = [(*row[:5], encode_offset(row[5]), row[6]) for row in rows]
        cursor = raw.cursor()
        try:
            if self._dialect == "postgresql":
                # the commit-wide columns are bound once, not repeated per row
                arrays = [list(column) for column in zip(*encoded, strict=True)]
                cursor.execute(
                    f"INSERT INTO checkpoint_entries ({quoted}) SELECT s, st, p, f, b, o, c, "
                    "%s::bigint, %s::varchar, %s::float8 FROM unnest("
                    "%s::varchar[], %s::varchar[], %s::int[], %s::int[], %s::int[], "
                    f"%s::varchar[], %s::varchar[]) AS u(s, st, p, f, b, o, c) {upsert}",
                    [job_model_version, processor_id, now, *arrays])
            elif self._dialect == "sqlite":
                tail = (job_model_version, processor_id, now)
                cursor.executemany(
                    f"INSERT INTO checkpoint_entries ({quoted}) VALUES "
                    f"({', '.join('?' * len(_ENTRY_COLUMNS))}) {upsert}",
                    [row + tail for row in encoded])
            else:
                raise CheckpointError(f"unsupported database dialect {self._dialect!r}")
            return max(0, int(cursor.rowcount))
        finally:
            cursor.close()

    def _insert(self, table: Table) -> postgresql.Insert | sqlite.Insert:
        if self._dialect == "postgresql":
            return postgresql.insert(table)
        if self._dialect == "sqlite":
            return sqlite.insert(table)
        raise CheckpointError(f"unsupported database dialect {self._dialect!r}")

    def _offsets(self, conn: Connection, keys: Iterable[BucketKey]) -> dict[BucketKey, int]:
        """Current offsets of the partitions touched (a partition has few entries)."""
        t = checkpoint_entries
        partitions = sorted({k.ssp for k in keys})
        out: dict[BucketKey, int] = {}
        for chunk in _chunks(partitions, 500):
            rows = conn.execute(
                select(t.c.system, t.c.stream, t.c.partition, t.c.factor, t.c.bucket,
                       t.c.offset)
                .where(tuple_(t.c.system, t.c.stream, t.c.partition).in_(
                    [(p.system, p.stream, p.partition) for p in chunk])))
            for r in rows:
                key = BucketKey(SystemStreamPartition(r.system, r.stream, r.partition),
                                r.factor, r.bucket)
                out[key] = int(r.offset)
        return out

    @contextmanager
    def _connect(self) -> Iterator[Connection]:
        try:
            with self._engine.connect() as conn:
                yield conn
        except OperationalError as e:
            raise CheckpointStoreUnavailable(f"checkpoint store unreachable: {e.orig}") from e

    @contextmanager
    def _begin(self) -> Iterator[Connection]:
        try:
            with self._engine.begin() as conn:
                yield conn
        except OperationalError as e:
            raise CheckpointStoreUnavailable(f"checkpoint store unreachable: {e.orig}") from e


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
