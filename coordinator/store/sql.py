"""MetadataStore on SQL (SQLite by default, PostgreSQL by URL), via SQLAlchemy Core.

One table, ``metadata_entries`` (namespace, key) -> (value, version, updated_at). Writes are
single statements or one transaction each, so a failed call writes nothing.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Double,
    Engine,
    LargeBinary,
    MetaData,
    String,
    Table,
    and_,
    delete,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import IntegrityError, OperationalError

from coordinator.errors import StoreUnavailable
from coordinator.store.metadata import Fence, Versioned

metadata = MetaData()

metadata_entries = Table(
    "metadata_entries",
    metadata,
    Column("namespace", String(128), primary_key=True),
    Column("key", String(512), primary_key=True),
    Column("value", LargeBinary, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("updated_at", Double, nullable=False),
)


_SQLITE_UPSERT = (
    "INSERT INTO metadata_entries (namespace, key, value, version, updated_at) "
    "VALUES (?, ?, ?, 1, ?) ON CONFLICT (namespace, key) DO UPDATE SET "
    "value = excluded.value, version = metadata_entries.version + 1, "
    "updated_at = excluded.updated_at")


class SqlMetadataStore:
    """A :class:`~coordinator.store.metadata.MetadataStore` over one SQLAlchemy engine."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def get(self, namespace: str, key: str) -> Versioned | None:
        """The value of ``key``, or None."""
        t = metadata_entries
        with self._connect() as conn:
            row = conn.execute(
                select(t.c.value, t.c.version).where(
                    and_(t.c.namespace == namespace, t.c.key == key))
            ).first()
        return None if row is None else Versioned(bytes(row.value), int(row.version))

    def put(self, namespace: str, key: str, value: bytes) -> int:
        """Write ``value``; return the new version."""
        with self._begin() as conn:
            return _upsert(conn, namespace, key, value, time.time())

    def put_many(self, namespace: str, values: Mapping[str, bytes]) -> None:
        """Write several keys of one namespace in one transaction (one batched upsert:
        task locality of a 100k-task job model is 100k keys)."""
        if not values:
            return
        t = metadata_entries
        now = time.time()
        dialect = self._engine.dialect.name
        if dialect not in ("sqlite", "postgresql"):
            with self._begin() as conn:
                for key in sorted(values):
                    _upsert(conn, namespace, key, values[key], now)
            return
        if dialect == "sqlite":
            # the rows as plain tuples to the driver's executemany: SQLAlchemy's per-row
            # parameter processing took 2 s of the GIL for the 200k task localities of a
            # factor change, while the coordinator answered a thousand processors
            with self._begin() as conn:
                conn.exec_driver_sql(_SQLITE_UPSERT, [(namespace, k, values[k], now)
                                                      for k in sorted(values)])
            return
        stmt = postgresql.insert(t)
        stmt = stmt.on_conflict_do_update(
            index_elements=[t.c.namespace, t.c.key],
            set_={"value": stmt.excluded.value, "version": t.c.version + 1,
                  "updated_at": stmt.excluded.updated_at},
        )
        rows = [{"namespace": namespace, "key": k, "value": values[k], "version": 1,
                 "updated_at": now} for k in sorted(values)]
        with self._begin() as conn:
            conn.execute(stmt, rows)

    def delete(self, namespace: str, key: str) -> bool:
        """Remove ``key``; True if it existed."""
        t = metadata_entries
        with self._begin() as conn:
            result = conn.execute(
                delete(t).where(and_(t.c.namespace == namespace, t.c.key == key)))
            return bool(result.rowcount)

    def list(self, namespace: str) -> dict[str, Versioned]:
        """Every key of ``namespace`` with its value, in key order."""
        t = metadata_entries
        with self._connect() as conn:
            rows = conn.execute(
                select(t.c.key, t.c.value, t.c.version)
                .where(t.c.namespace == namespace).order_by(t.c.key)
            )
            return {row.key: Versioned(bytes(row.value), int(row.version)) for row in rows}

    def keys(self, namespace: str) -> builtins.list[str]:
        """The keys of ``namespace``, sorted."""
        t = metadata_entries
        with self._connect() as conn:
            return list(conn.execute(select(t.c.key).where(t.c.namespace == namespace)
                                     .order_by(t.c.key)).scalars())

    def compare_and_set(
        self, namespace: str, key: str, value: bytes, expected_version: int | None,
        fence: Fence | None = None,
    ) -> int | None:
        """Write only if the key is at ``expected_version`` (None: absent) and ``fence``
        holds, in one transaction; the new version, or None."""
        t = metadata_entries
        try:
            with self._begin() as conn:
                if fence is not None:
                    held = conn.execute(select(t.c.version).where(and_(
                        t.c.namespace == fence.namespace, t.c.key == fence.key))
                        .with_for_update()).scalar()
                    if held != fence.version:
                        return None
                if expected_version is None:
                    conn.execute(insert(t).values(namespace=namespace, key=key, value=value,
                                                  version=1, updated_at=time.time()))
                    return 1
                result = conn.execute(
                    update(t).where(and_(t.c.namespace == namespace, t.c.key == key,
                                         t.c.version == expected_version))
                    .values(value=value, version=expected_version + 1, updated_at=time.time()))
                return expected_version + 1 if result.rowcount == 1 else None
        except IntegrityError:
            return None

    def compare_and_set_many(
        self, namespace: str, writes: Mapping[str, tuple[bytes, int]],
    ) -> dict[str, int | None]:
        """Each key written only if at its expected version, all in one transaction (one
        commit instead of one per key); key -> new version, or None where refused."""
        t = metadata_entries
        out: dict[str, int | None] = {}
        if not writes:
            return out
        now = time.time()
        with self._begin() as conn:
            for key in sorted(writes):
                value, expected = writes[key]
                result = conn.execute(
                    update(t).where(and_(t.c.namespace == namespace, t.c.key == key,
                                         t.c.version == expected))
                    .values(value=value, version=expected + 1, updated_at=now))
                out[key] = expected + 1 if result.rowcount == 1 else None
        return out

    def watch(self, namespace: str, key: str, callback: Callable[[], bool | None]) -> None:
        """Call ``callback`` once: this process is the only writer of an embedded store."""
        callback()

    def ping(self) -> None:
        """Raise StoreUnavailable if the database cannot be reached."""
        with self._connect() as conn:
            conn.execute(text("SELECT 1"))

    def close(self) -> None:
        """Dispose of the engine's connections."""
        self._engine.dispose()

    def _connect(self) -> AbstractContextManager[Connection]:
        return _guarded(self._engine, begin=False)

    def _begin(self) -> AbstractContextManager[Connection]:
        return _guarded(self._engine, begin=True)


def _upsert(conn: Connection, namespace: str, key: str, value: bytes, now: float) -> int:
    """Bump the version in place (atomic under concurrency), or insert version 1."""
    t = metadata_entries
    where = and_(t.c.namespace == namespace, t.c.key == key)
    bumped = conn.execute(
        update(t).where(where).values(value=value, version=t.c.version + 1, updated_at=now)
        .returning(t.c.version)
    ).scalar()
    if bumped is not None:
        return int(bumped)
    conn.execute(insert(t).values(namespace=namespace, key=key, value=value, version=1,
                                  updated_at=now))
    return 1


@contextmanager
def _guarded(engine: Engine, begin: bool) -> Iterator[Connection]:
    """A connection (in a transaction when ``begin``) whose connection failures surface as
    StoreUnavailable, so the API can answer 503 instead of 500."""
    try:
        with engine.begin() if begin else engine.connect() as conn:
            yield conn
    except OperationalError as e:
        raise StoreUnavailable(f"store unreachable: {e.orig}") from e
