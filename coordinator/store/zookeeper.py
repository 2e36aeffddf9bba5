"""The MetadataStore on ZooKeeper (kazoo): one znode per key, versions from znode versions.

Layout under the job's root (``/coxswain/{job}`` unless a chroot or root is given):
``/{namespace}/{key}`` holds the value; the store version is the znode version + 1 (so a
fresh key is at version 1, as in every MetadataStore). Keys are percent-quoted where ZooKeeper
would misread them (``/``, a leading ``.``).

Values over ``chunk_bytes`` (ZooKeeper refuses requests over ~1 MB) are written as chunks
under ``/_chunks/{namespace}/{key}/{write id}-{n}`` first; the key's znode then gets a small
manifest (write id, chunk count, size, SHA-256), so the key changes atomically with the
manifest write. A reader checks the checksum and retries if a concurrent writer replaced
the chunks. Chunks of earlier writes are deleted after each write; a writer that crashed
between its chunks and its manifest leaves chunks that the next write of that key removes.

Compare-and-set may carry a :class:`Fence`: a znode version checked in the same ZooKeeper
transaction, which is how a deposed leader's publication is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from coordinator.errors import StoreUnavailable
from coordinator.store.metadata import Fence, Versioned
from coordinator.store.zk_acl import ZkIdentity, protect

log = logging.getLogger("coxswain.zookeeper")

DEFAULT_CHUNK_BYTES = 512 * 1024
_SPECIAL = {("jobModelVersion", "latest"): "jobModelVersion",
            ("jobModelVersion", "active"): "activeJobModelVersion",
            ("config", "desired"): "config"}
_MANIFEST = b"COXSWAIN-CHUNKED\n"
_BATCH_BYTES = 512 * 1024  # per ZooKeeper transaction of put_many
_BATCH_OPS = 500
_IN_FLIGHT = 3  # put_many's transactions awaiting their answer at once
_UNAVAILABLE = (ConnectionLoss, SessionExpiredError, ConnectionClosedError,
                OperationTimeoutError, KazooTimeoutError)


def _quote(key: str) -> str:
    quoted = quote(key, safe=" ,[]_-:()@+=")
    return "%2E" + quoted[1:] if quoted.startswith(".") else quoted


@contextmanager
def _guarded(client: KazooClient) -> Iterator[None]:
    """ZooKeeper connection trouble surfaces as StoreUnavailable (503, retry later), at
    once: kazoo would queue a request made without a connection until one returns."""
    if not client.connected:
        raise StoreUnavailable("no ZooKeeper connection")
    try:
        yield
    except _UNAVAILABLE as e:
        raise StoreUnavailable(f"ZooKeeper unavailable: {type(e).__name__}") from e


class ZkMetadataStore:
    """A :class:`~coordinator.store.metadata.MetadataStore` over one kazoo client."""

    def __init__(self, client: KazooClient, root: str,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        if not root.startswith("/") or root.endswith("/"):
            raise ValueError(f"root must be an absolute znode path, got {root!r}")
        self._zk = client
        self.root = root
        self._chunk_bytes = chunk_bytes

    # -- paths

    def path(self, namespace: str, key: str | None = None) -> str:
        """The znode of ``namespace`` (or of one of its keys). A few keys have the
        Samza-like places of docs/deployment.md's metadata layout: the version pointers are
        ``/jobModelVersion`` and ``/activeJobModelVersion``, the desired config is
        ``/config``, a version's barrier is ``/barriers/{version}/state``."""
        if key is not None:
            special = _SPECIAL.get((namespace, key))
            if special is not None:
                return f"{self.root}/{special}"
            if namespace == "barriers":
                return f"{self.root}/barriers/{_quote(key)}/state"
        base = f"{self.root}/{_quote(namespace)}"
        return base if key is None else f"{base}/{_quote(key)}"

    def _key_node(self, namespace: str, key: str) -> str:
        """The znode to remove to forget ``key`` (a barrier's whole folder)."""
        if namespace == "barriers":
            return f"{self.root}/barriers/{_quote(key)}"
        return self.path(namespace, key)

    def _chunk_dir(self, namespace: str, key: str) -> str:
        return f"{self.root}/_chunks/{_quote(namespace)}/{_quote(key)}"

    # -- MetadataStore

    def get(self, namespace: str, key: str) -> Versioned | None:
        """The value of ``key``, or None."""
        with _guarded(self._zk):
            for _ in range(5):
                try:
                    data, stat = self._zk.get(self.path(namespace, key))
                except NoNodeError:
                    return None
                value = self._unchunk(namespace, key, data)
                if value is not None:
                    return Versioned(value, stat.version + 1)
            raise StoreUnavailable(f"{namespace}/{key}: chunks kept changing while read")

    def put(self, namespace: str, key: str, value: bytes) -> int:
        """Write ``value``; return the new version."""
        with _guarded(self._zk):
            data, chunk_id = self._chunk(namespace, key, value)
            path = self.path(namespace, key)
            while True:
                try:
                    stat = self._zk.set(path, data)
                    break
                except NoNodeError:
                    try:
                        self._zk.create(path, data, makepath=True)
                        stat = None
                        break
                    except NodeExistsError:
                        continue
            self._clean_chunks(namespace, key, keep=chunk_id)
            return 1 if stat is None else stat.version + 1

    def put_many(self, namespace: str, values: Mapping[str, bytes]) -> None:
        """Write several keys, in ZooKeeper transactions of bounded size (atomic per batch,
        not across batches: ZooKeeper caps one request at ~1 MB; after a failed batch, the
        few sent behind it may still be applied)."""
        if not values:
            return
        with _guarded(self._zk):
            self._zk.ensure_path(self.path(namespace))
            existing = set(self._zk.get_children(self.path(namespace)))
            big = {k: v for k, v in values.items() if len(v) > self._chunk_bytes}
            for key, value in big.items():
                self.put(namespace, key, value)
            batch = self._zk.transaction()
            size = ops = 0
            # transactions pipelined, a few in flight (ZooKeeper applies one session's
            # requests in order): the next batches travel and are prepared while one is
            # logged and applied (100k new task localities: 2.7 -> 2.2 s here; more in
            # flight gained little and held other requests of the session up longer)
            in_flight: deque[Any] = deque()
            for key in sorted(set(values) - set(big)):
                value = values[key]
                quoted = _quote(key)
                path = self.path(namespace, key)
                if quoted in existing:
                    batch.set_data(path, value)
                else:
                    batch.create(path, value)
                size, ops = size + len(value) + len(path), ops + 1
                if size >= _BATCH_BYTES or ops >= _BATCH_OPS:
                    if len(in_flight) >= _IN_FLIGHT:
                        self._check(in_flight.popleft().get())
                    in_flight.append(batch.commit_async())
                    batch, size, ops = self._zk.transaction(), 0, 0
            if ops:
                in_flight.append(batch.commit_async())
            while in_flight:
                self._check(in_flight.popleft().get())

    @staticmethod
    def _check(results: list[Any]) -> None:
        failed = [r for r in results if isinstance(r, Exception)
                  and not isinstance(r, (RolledBackError, RuntimeInconsistency))]
        if failed:
            raise StoreUnavailable(f"ZooKeeper transaction failed: {failed[0]!r}")

    def delete(self, namespace: str, key: str) -> bool:
        """Remove ``key`` (and its chunks); True if it existed."""
        with _guarded(self._zk):
            node = self._key_node(namespace, key)
            try:
                self._zk.delete(node)
                existed = True
            except NoNodeError:
                existed = False
            except NotEmptyError:
                self._zk.delete(node, recursive=True)
                existed = True
            self._delete_tree(self._chunk_dir(namespace, key))
            return existed

    def keys(self, namespace: str) -> list[str]:
        """The keys of ``namespace``, sorted."""
        with _guarded(self._zk):
            try:
                children = self._zk.get_children(self.path(namespace))
            except NoNodeError:
                return []
            return sorted(unquote(c) for c in children)

    def list(self, namespace: str) -> dict[str, Versioned]:
        """Every key of ``namespace`` with its value, in key order (reads in parallel)."""
        with _guarded(self._zk):
            keys = self.keys(namespace)
            pending = [(k, self._zk.get_async(self.path(namespace, k))) for k in keys]
            out: dict[str, Versioned] = {}
            for key, result in pending:
                try:
                    data, stat = result.get()
                except NoNodeError:
                    continue  # deleted meanwhile
                value = self._unchunk(namespace, key, data)
                if value is None:
                    found = self.get(namespace, key)
                    if found is not None:
                        out[key] = found
                    continue
                out[key] = Versioned(value, stat.version + 1)
            return out

    def compare_and_set(
        self, namespace: str, key: str, value: bytes, expected_version: int | None,
        fence: Fence | None = None,
    ) -> int | None:
        """Write only if the key is at ``expected_version`` (None: absent) and ``fence``
        holds, in one ZooKeeper transaction; the new version, or None when refused."""
        with _guarded(self._zk):
            data, chunk_id = self._chunk(namespace, key, value)
            path = self.path(namespace, key)
            if expected_version is None:
                self._zk.ensure_path(path.rsplit("/", 1)[0])
            tx = self._zk.transaction()
            if fence is not None:
                tx.check(self.path(fence.namespace, fence.key), fence.version - 1)
            if expected_version is None:
                tx.create(path, data)
            else:
                tx.set_data(path, data, version=expected_version - 1)
            results = tx.commit()
            refused = [r for r in results if isinstance(r, Exception)]
            if refused:
                if chunk_id is not None:
                    self._delete_tree(self._chunk_dir(namespace, key), only=chunk_id)
                # ops after the failed one report RolledBack / RuntimeInconsistency
                if not all(isinstance(r, (BadVersionError, NoNodeError, NodeExistsError,
                                          RolledBackError, RuntimeInconsistency))
                           for r in refused):
                    raise StoreUnavailable(f"ZooKeeper transaction failed: {refused!r}")
                return None
            self._clean_chunks(namespace, key, keep=chunk_id)
            written = results[-1]
            if isinstance(written, ZnodeStat):
                return int(written.version) + 1
            return 1

    def compare_and_set_many(
        self, namespace: str, writes: Mapping[str, tuple[bytes, int]],
    ) -> dict[str, int | None]:
        """Each key written only if at its expected version, in ZooKeeper transactions of
        bounded size: one round trip for many lease renewals instead of two each. A
        transaction is all or nothing, so a refused key is taken out and the rest sent
        again (a refusal is rare: another replica's write, the leader's removal)."""
        out: dict[str, int | None] = {}
        if not writes:
            return out
        batched: set[str] = set()
        with _guarded(self._zk):
            batch: list[tuple[str, bytes, int]] = []
            size = 0
            for key in sorted(writes):
                value, expected = writes[key]
                if len(value) > self._chunk_bytes or value.startswith(_MANIFEST):
                    out[key] = self.compare_and_set(namespace, key, value, expected)
                    continue
                batch.append((key, value, expected))
                size += len(value) + len(key)
                if size >= _BATCH_BYTES or len(batch) >= _BATCH_OPS:
                    self._set_versions(namespace, batch, out, batched)
                    batch, size = [], 0
            if batch:
                self._set_versions(namespace, batch, out, batched)
            # A key written small may have been chunked before: its old chunks go. One
            # look at the namespace's chunk folder, not one per key, when none ever was.
            # (a key written alone, by compare_and_set, has had its own cleaning)
            if self._zk.exists(f"{self.root}/_chunks/{_quote(namespace)}") is not None:
                for key in batched:
                    self._clean_chunks(namespace, key, keep=None)
        return out

    def _set_versions(self, namespace: str, batch: Sequence[tuple[str, bytes, int]],
                      out: dict[str, int | None], batched: set[str]) -> None:
        """Write ``batch`` into ``out``; the keys written in a transaction into
        ``batched``."""
        pending = batch
        for _ in range(3):
            if not pending:
                return
            tx = self._zk.transaction()
            for key, value, expected in pending:
                tx.set_data(self.path(namespace, key), value, version=expected - 1)
            results = tx.commit()
            refused = {i for i, r in enumerate(results)
                       if isinstance(r, (BadVersionError, NoNodeError))}
            trouble = [r for r in results if isinstance(r, Exception) and not isinstance(
                r, (BadVersionError, NoNodeError, RolledBackError, RuntimeInconsistency))]
            if trouble:
                raise StoreUnavailable(f"ZooKeeper transaction failed: {trouble[0]!r}")
            if not refused:
                for (key, _, _), stat in zip(pending, results, strict=True):
                    out[key] = int(stat.version) + 1 if isinstance(stat, ZnodeStat) else None
                    batched.add(key)
                return
            # ZooKeeper names the first refused op only; the ones after it are unjudged
            for i in refused:
                out[pending[i][0]] = None
            pending = [op for i, op in enumerate(pending) if i not in refused]
        # refusals keep coming (each round names one): the rest one by one
        for key, value, expected in pending:
            out[key] = self.compare_and_set(namespace, key, value, expected)

    def watch(self, namespace: str, key: str, callback: Callable[[], bool | None]) -> None:
        """Call ``callback`` (in kazoo's thread; it must not block) now and whenever the key
        changes, is created or deleted, until it returns False. Survives reconnects."""

        def on_change(_data: bytes | None, _stat: ZnodeStat | None) -> bool | None:
            try:
                return callback()
            except Exception:  # a watcher must not die silently with the callback
                log.exception("metadata watch callback failed")
                return None

        self._zk.DataWatch(self.path(namespace, key), on_change)

    def ping(self) -> None:
        """Raise StoreUnavailable unless the client has a live session."""
        if not self._zk.connected:
            raise StoreUnavailable("no ZooKeeper session")
        with _guarded(self._zk):
            self._zk.exists(self.root)

    def close(self) -> None:
        """Nothing: the kazoo client belongs to whoever created it."""

    # -- chunking

    def _chunk(self, namespace: str, key: str, value: bytes) -> tuple[bytes, str | None]:
        """The znode data for ``value``: itself, or a manifest after writing its chunks."""
        if len(value) <= self._chunk_bytes and not value.startswith(_MANIFEST):
            return value, None
        chunk_id = uuid.uuid4().hex[:12]
        base = self._chunk_dir(namespace, key)
        self._zk.ensure_path(base)
        n = 0
        for n, start in enumerate(range(0, len(value), self._chunk_bytes), start=1):
            self._zk.create(f"{base}/{chunk_id}-{n - 1:05d}",
                            value[start:start + self._chunk_bytes])
        manifest = {"id": chunk_id, "chunks": n, "size": len(value),
                    "sha256": hashlib.sha256(value).hexdigest()}
        return _MANIFEST + json.dumps(manifest).encode(), chunk_id

    def _unchunk(self, namespace: str, key: str, data: bytes) -> bytes | None:
        """The value a znode's data stands for; None if its chunks changed under us."""
        if not data.startswith(_MANIFEST):
            return data
        manifest = json.loads(data[len(_MANIFEST):])
        base = self._chunk_dir(namespace, key)
        reads = [self._zk.get_async(f"{base}/{manifest['id']}-{i:05d}")
                 for i in range(manifest["chunks"])]
        try:
            value = b"".join(r.get()[0] for r in reads)
        except NoNodeError:
            return None
        if len(value) != manifest["size"] or \
                hashlib.sha256(value).hexdigest() != manifest["sha256"]:
            log.warning("%s/%s: chunk checksum mismatch; reading again", namespace, key)
            return None
        return value

    def _clean_chunks(self, namespace: str, key: str, keep: str | None) -> None:
        base = self._chunk_dir(namespace, key)
        try:
            children = self._zk.get_children(base)
        except NoNodeError:
            return
        for child in children:
            if keep is None or not child.startswith(keep + "-"):
                with suppress(NoNodeError):
                    self._zk.delete(f"{base}/{child}")

    def _delete_tree(self, path: str, only: str | None = None) -> None:
        try:
            if only is None:
                self._zk.delete(path, recursive=True)
                return
            for child in self._zk.get_children(path):
                if child.startswith(only + "-"):
                    self._zk.delete(f"{path}/{child}")
        except NoNodeError:
            pass


class ZkSession:
    """A started kazoo client for one replica, with its session state observable."""

    def __init__(self, hosts: str, session_timeout_s: float = 6.0,
                 connect_timeout_s: float = 15.0,
                 identity: ZkIdentity | None = None) -> None:
        # with an identity, every znode this client creates is that identity's alone
        # (``coordinator.store.zk_acl``)
        self.identity = identity
        self.client = KazooClient(hosts=hosts, timeout=session_timeout_s,
                                  connection_retry={"max_tries": -1, "max_delay": 1.0},
                                  command_retry={"max_tries": 2, "max_delay": 0.5},
                                  **({} if identity is None else identity.client_options()))
        self._connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()

    def start(self) -> None:
        """Connect (raises StoreUnavailable if no server answers in time)."""
        try:
            self.client.start(timeout=self._connect_timeout_s)
        except (KazooTimeoutError, KazooException) as e:
            self.client.stop()
            self.client.close()
            raise StoreUnavailable(f"cannot reach ZooKeeper at {self.client.hosts}: {e}") from e

    def protect(self, root: str) -> int:
        """With an identity: ``root`` and everything under it that identity's alone
        (znodes made before auth was on included); how many ACLs were set."""
        if self.identity is None:
            return 0
        return protect(self.client, root, self.identity)

    @property
    def connected(self) -> bool:
        """True while the client has a live session."""
        return bool(self.client.connected)

    def stop(self) -> None:
        """Close the session (its ephemeral nodes go at once)."""
        with self._lock:
            self.client.stop()
            self.client.close()
