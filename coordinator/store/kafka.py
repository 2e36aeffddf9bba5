"""The MetadataStore on a Kafka coordinator stream (SAMZA-1554: Kafka as the locality
storage layer): a compacted, single-partition topic ``__coxswain_coordinator_{job}``.

Records: key = ``{namespace}/{key}`` (UTF-8); value = JSON ``{"value": base64, "version":
n, "epoch": e, "source": replica, "ts": millis}``; a delete is a tombstone (null value),
so compaction eventually forgets the key. On start the store reads the topic to its end to
rebuild the state, then tails it; every write is acknowledged by the broker (acks=all,
idempotent producer) before the call returns.

What this store guarantees, versus ZooKeeper:

* **One writer at a time.** A Kafka topic has no compare-and-set, so the coordinator that
  writes must be the only one: on start it claims the next *writer epoch* (a record
  under ``_coordinatorStream/writerEpoch``) and stamps every record with it. Readers
  ignore records stamped with an epoch lower than the highest claimed before them in the
  log, so a stale coordinator (an old process still running during a redeploy) is
  fenced: its late writes are ignored,
  and it learns it was fenced when it reads the newer epoch (its writes then raise
  ``Fenced``). Compare-and-set is evaluated by that single writer against its state, which
  is exact because nobody else writes. There is no leader election in this mode: run one
  replica (HA needs ZooKeeper).
* **Versions survive compaction**: each record carries the key's version, so replaying a
  compacted topic gives the same versions.
* **A fenced writer's late record can shadow a key under compaction** (compaction keeps a
  key's last record, even one readers ignore): the current writer re-appends its value of
  any key it sees shadowed that way.
* Values over ``chunk_bytes`` (the topic's max message size is ~1 MB) are written as chunk
  records ``{ns}/{key}#chunk/{write id}/{n}`` followed by a manifest with a SHA-256; chunks
  of older writes are tombstoned afterwards.
* ``watch`` calls back once: with one writer, every change is this process's own.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from common.kafka_clients import Brokers, settings_of
from coordinator.errors import Fenced, StoreUnavailable
from coordinator.store.metadata import Fence, Versioned

log = logging.getLogger("coxswain.coordinator_stream")
# errors of a partition this client's metadata does not know yet, not of a broker down
METADATA_LAGS = (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC,
                 KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE,
                 # a broker asked before its metadata names itself the new topic's
                 # leader (a loaded pass of the suite, at a store's first start)
                 KafkaError.NOT_LEADER_FOR_PARTITION)

EPOCH = ("_coordinatorStream", "writerEpoch")
DEFAULT_CHUNK_BYTES = 512 * 1024
_CHUNK_MARK = "#chunk/"


@dataclass(frozen=True, slots=True)
class _Entry:
    value: bytes
    version: int
    epoch: int
    offset: int


def topic_name(job: str) -> str:
    """The coordinator stream of ``job``."""
    return f"__coxswain_coordinator_{job}"


class KafkaMetadataStore:
    """A :class:`~coordinator.store.metadata.MetadataStore` on a compacted Kafka topic."""

    def __init__(self, bootstrap: Brokers, job: str, replica_id: str,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, timeout_s: float = 30.0,
                 topic_config: Mapping[str, str] | None = None) -> None:
        """``topic_config`` adds to the config of the topic when this store creates it."""
        self.topic = topic_name(job)
        self._topic_config = dict(topic_config or {})
        self._kafka = settings_of(bootstrap)
        self._replica_id = replica_id
        self._chunk_bytes = chunk_bytes
        self._timeout_s = timeout_s
        self._lock = threading.RLock()
        self._applied = threading.Condition(self._lock)
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._deleted_at: dict[tuple[str, str], int] = {}
        self._chunks: dict[str, bytes] = {}
        self._position = 0  # next offset the tail will read
        self._max_epoch = 0
        self._epoch = 0  # ours, once claimed
        self._fenced = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer = Producer(self._kafka.client({
            "acks": "all", "enable.idempotence": True,
            "linger.ms": 0, "message.max.bytes": 1_000_000, "log_level": 2}))
        self._consumer: Consumer | None = None
        self._probe: Consumer | None = None
        self._errors: builtins.list[str] = []

    # -- lifecycle

    def start(self) -> None:
        """Create the topic if missing, read it to the end, claim the writer epoch, tail."""
        self._ensure_topic()
        self._consumer = Consumer(self._kafka.client({
            "group.id": f"coxswain-{uuid.uuid4().hex}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "enable.partition.eof": True, "log_level": 2}))
        self._consumer.assign([TopicPartition(self.topic, 0, 0)])
        # the tail's consumer is polled by its thread; end offsets are asked of another
        self._probe = Consumer(self._kafka.client({
            "group.id": f"coxswain-probe-{uuid.uuid4().hex}",
            "enable.auto.commit": False, "log_level": 2}))
        self._thread = threading.Thread(target=self._tail, name="coordinator-stream",
                                        daemon=True)
        self._thread.start()
        self._catch_up()
        found = self._entries.get(EPOCH)
        self._epoch = max(self._max_epoch, found.version if found else 0) + 1
        self._append(EPOCH, self._replica_id.encode(), self._epoch, wait=True)
        self._catch_up()
        if self._max_epoch != self._epoch:
            raise Fenced(f"another coordinator claimed epoch {self._max_epoch} while this "
                         f"one claimed {self._epoch}")
        log.info("coordinator stream %s: %d keys, writer epoch %d", self.topic,
                 len(self._entries), self._epoch)

    @property
    def epoch(self) -> int:
        """This writer's epoch."""
        return self._epoch

    def close(self) -> None:
        """Stop tailing and flush."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._consumer is not None:
            self._consumer.close()
        if self._probe is not None:
            self._probe.close()
        self._producer.flush(10)

    # -- MetadataStore

    def get(self, namespace: str, key: str) -> Versioned | None:
        """The value of ``key``, or None."""
        with self._lock:
            e = self._entries.get((namespace, key))
            return None if e is None else Versioned(e.value, e.version)

    def put(self, namespace: str, key: str, value: bytes) -> int:
        """Write ``value``; return the new version."""
        with self._lock:
            self._require_writer()
            current = self._entries.get((namespace, key))
            version = (current.version if current else 0) + 1
            self._write((namespace, key), value, version)
            return version

    def put_many(self, namespace: str, values: Mapping[str, bytes]) -> None:
        """Write several keys (one flush for all; not atomic across keys)."""
        with self._lock:
            self._require_writer()
            pending: builtins.list[tuple[tuple[str, str], bytes, int, builtins.list[int]]] = []
            for key in sorted(values):
                k = (namespace, key)
                current = self._entries.get(k)
                version = (current.version if current else 0) + 1
                if len(values[key]) > self._chunk_bytes:
                    self._write(k, values[key], version)
                    continue
                offsets: builtins.list[int] = []
                self._produce(f"{namespace}/{key}",
                              self._record(values[key], version), offsets)
                pending.append((k, values[key], version, offsets))
            self._flush()
            for k, value, version, offsets in pending:
                if not offsets:
                    raise StoreUnavailable(f"write of {k[0]}/{k[1]} not acknowledged")
                self._apply_local(k, _Entry(value, version, self._epoch, offsets[0]))

    def delete(self, namespace: str, key: str) -> bool:
        """Tombstone ``key``; True if it existed."""
        with self._lock:
            self._require_writer()
            if (namespace, key) not in self._entries:
                return False
            offsets: builtins.list[int] = []
            self._produce(f"{namespace}/{key}", None, offsets)
            self._flush()
            self._entries.pop((namespace, key), None)
            if offsets:  # the tail must not bring back what it reads from before
                self._deleted_at[(namespace, key)] = offsets[0]
            return True

    def keys(self, namespace: str) -> builtins.list[str]:
        """The keys of ``namespace``, sorted."""
        with self._lock:
            return sorted(k for ns, k in self._entries if ns == namespace)

    def list(self, namespace: str) -> dict[str, Versioned]:
        """Every key of ``namespace`` with its value, in key order."""
        with self._lock:
            return {k: Versioned(e.value, e.version)
                    for (ns, k), e in sorted(self._entries.items()) if ns == namespace}

    def compare_and_set(
        self, namespace: str, key: str, value: bytes, expected_version: int | None,
        fence: Fence | None = None,
    ) -> int | None:
        """Write only if the key is at ``expected_version`` and ``fence`` holds, judged by
        the single writer on its exact state; the new version, or None."""
        with self._lock:
            if self._fenced:
                return None
            current = self._entries.get((namespace, key))
            if (current.version if current else None) != expected_version:
                return None
            if fence is not None:
                held = self._entries.get((fence.namespace, fence.key))
                if held is None or held.version != fence.version:
                    return None
            version = (expected_version or 0) + 1
            self._write((namespace, key), value, version)
            return version

    def compare_and_set_many(
        self, namespace: str, writes: Mapping[str, tuple[bytes, int]],
    ) -> dict[str, int | None]:
        """Each key's compare-and-set in turn (the single writer judges each on its exact
        state; every accepted one is its own record on the stream)."""
        return {key: self.compare_and_set(namespace, key, value, expected)
                for key, (value, expected) in sorted(writes.items())}

    def watch(self, namespace: str, key: str, callback: Callable[[], bool | None]) -> None:
        """Call ``callback`` once: the single writer's changes are its own."""
        callback()

    def ping(self) -> None:
        """Raise StoreUnavailable unless the broker answers."""
        try:
            self._producer.list_topics(self.topic, timeout=2.0)
        except KafkaException as e:
            raise StoreUnavailable(f"Kafka unavailable: {e.args[0]}") from e
        if self._fenced:
            raise StoreUnavailable("fenced: a newer coordinator writes this job's stream")

    # -- writing

    def _require_writer(self) -> None:
        if self._fenced:
            raise Fenced(f"a newer coordinator (epoch {self._max_epoch}) writes "
                         f"{self.topic}; this one (epoch {self._epoch}) is fenced")

    def _write(self, k: tuple[str, str], value: bytes, version: int, wait: bool = True) -> None:
        chunk_id = None
        if len(value) > self._chunk_bytes:
            chunk_id = uuid.uuid4().hex[:12]
            prefix = f"{k[0]}/{k[1]}{_CHUNK_MARK}{chunk_id}/"
            parts = [value[i:i + self._chunk_bytes]
                     for i in range(0, len(value), self._chunk_bytes)]
            for n, part in enumerate(parts):
                self._produce(f"{prefix}{n:05d}", self._record(part, 0))
                self._chunks[f"{prefix}{n:05d}"] = part  # the tail will confirm it
            manifest = {"chunked": chunk_id, "chunks": len(parts), "size": len(value),
                        "sha256": hashlib.sha256(value).hexdigest()}
            self._append(k, json.dumps(manifest).encode(), version, wait=True, chunked=True)
            old = [c for c in self._chunks if c.startswith(f"{k[0]}/{k[1]}{_CHUNK_MARK}")
                   and not c.startswith(prefix)]
            for c in old:
                self._tombstone(c)
                self._chunks.pop(c, None)
            self._flush()
            return
        self._append(k, value, version, wait=wait)

    def _record(self, value: bytes, version: int, chunked: bool = False,
                epoch: int | None = None) -> bytes:
        body: dict[str, Any] = {"value": base64.b64encode(value).decode(), "version": version,
                                "epoch": self._epoch if epoch is None else epoch,
                                "source": self._replica_id,
                                "ts": int(time.time() * 1000)}
        if chunked:
            body["chunked"] = True
        return json.dumps(body).encode()

    def _append(self, k: tuple[str, str], value: bytes, version: int, *, wait: bool,
                chunked: bool = False) -> None:
        epoch = self._epoch
        if k == EPOCH:
            epoch = version  # an epoch claim carries the epoch it claims
        offsets: builtins.list[int] = []
        self._produce(f"{k[0]}/{k[1]}", self._record(value, version, chunked, epoch), offsets)
        if wait:
            self._flush()
            if not offsets:
                raise StoreUnavailable(f"write of {k[0]}/{k[1]} not acknowledged")
            real = self._resolve(value, chunked)
            self._apply_local(k, _Entry(real, version, epoch, offsets[0]))

    def _resolve(self, value: bytes, chunked: bool) -> bytes:
        if not chunked:
            return value
        manifest = json.loads(value)
        return self._assemble(manifest) or b""

    def _produce(self, key: str, value: bytes | None,
                 offsets: builtins.list[int] | None = None) -> None:
        errors = self._errors

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            elif offsets is not None:
                offsets.append(int(msg.offset()))

        while True:
            try:
                self._producer.produce(self.topic, key=key.encode(), value=value,
                                       partition=0, on_delivery=delivered)
                break
            except BufferError:
                self._producer.poll(0.1)

    def _tombstone(self, key: str) -> None:
        self._produce(key, None)

    def _flush(self) -> None:
        left = self._producer.flush(self._timeout_s)
        errors, self._errors = self._errors, []
        if left or errors:
            raise StoreUnavailable(f"Kafka did not acknowledge the write: "
                                   f"{errors[0] if errors else f'{left} pending'}")

    def _apply_local(self, k: tuple[str, str], entry: _Entry) -> None:
        current = self._entries.get(k)
        if current is not None and current.offset >= entry.offset:
            return
        self._entries[k] = entry
        self._deleted_at.pop(k, None)
        if k == EPOCH:
            self._max_epoch = max(self._max_epoch, entry.version)

    # -- reading

    def _catch_up(self) -> None:
        """Wait until the tail has applied everything up to the topic's current end."""
        assert self._probe is not None
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                _, high = self._probe.get_watermark_offsets(
                    TopicPartition(self.topic, 0),
                    timeout=max(0.1, deadline - time.monotonic()))
                break
            except KafkaException as e:
                # a topic created a moment ago may not be in this client's metadata yet
                # (seen on a loaded machine): asked again until the timeout
                if e.args[0].code() in METADATA_LAGS and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                raise StoreUnavailable(f"Kafka unavailable: {e.args[0]}") from e
        deadline = time.monotonic() + self._timeout_s
        with self._applied:
            while self._position < high:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreUnavailable(f"could not read {self.topic} to its end")
                self._applied.wait(left)

    def _tail(self) -> None:
        assert self._consumer is not None
        while not self._stop.is_set():
            try:
                msg = self._consumer.poll(0.2)
            except KafkaException:
                continue
            if msg is None:
                continue
            error, offset, key = msg.error(), msg.offset() or 0, msg.key() or b""
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    with self._applied:
                        self._position = max(self._position, offset)
                        self._applied.notify_all()
                continue
            with self._applied:
                self._apply_record(key.decode(), msg.value(), offset)
                self._position = offset + 1
                self._applied.notify_all()

    def _apply_record(self, raw_key: str, raw: bytes | None, offset: int) -> None:
        if _CHUNK_MARK in raw_key:
            if raw is None:
                self._chunks.pop(raw_key, None)
            else:
                self._chunks[raw_key] = base64.b64decode(json.loads(raw)["value"])
            return
        namespace, _, key = raw_key.partition("/")
        k = (namespace, key)
        current = self._entries.get(k)
        if raw is None:
            if current is None or current.offset < offset:
                self._entries.pop(k, None)
                self._deleted_at[k] = offset
            return
        body = json.loads(raw)
        epoch = int(body.get("epoch", 0))
        if k == EPOCH:
            self._max_epoch = max(self._max_epoch, int(body["version"]))
            if self._epoch and self._max_epoch > self._epoch and not self._fenced:
                self._fenced = True
                log.error("fenced: coordinator %s claimed epoch %d (ours %d); this replica "
                          "no longer writes %s", body.get("source"), self._max_epoch,
                          self._epoch, self.topic)
        elif epoch < self._max_epoch:
            log.warning("ignoring a write of %s by a fenced coordinator (epoch %d < %d)",
                        raw_key, epoch, self._max_epoch)
            if current is not None and self._epoch == self._max_epoch and not self._fenced:
                # compaction would keep the ignored record: write ours again after it
                if len(current.value) > self._chunk_bytes:
                    log.error("%s: a fenced write shadows a chunked value; it is rewritten "
                              "on its next change", raw_key)
                self._produce(raw_key, self._record(current.value, current.version))
            return
        if current is not None and current.offset >= offset:
            return
        if self._deleted_at.get(k, -1) > offset:
            return
        value = base64.b64decode(body["value"])
        if body.get("chunked"):
            assembled = self._assemble(json.loads(value))
            if assembled is None:
                log.error("%s: chunks missing or checksum mismatch; keeping the old value",
                          raw_key)
                return
            value = assembled
        self._entries[k] = _Entry(value, int(body["version"]), epoch, offset)

    def _assemble(self, manifest: dict[str, Any]) -> bytes | None:
        prefix = None
        for name in self._chunks:
            if f"{_CHUNK_MARK}{manifest['chunked']}/" in name:
                prefix = name.rsplit("/", 1)[0] + "/"
                break
        if prefix is None:
            return None
        parts = [self._chunks.get(f"{prefix}{n:05d}") for n in range(manifest["chunks"])]
        if any(p is None for p in parts):
            return None
        value = b"".join(p for p in parts if p is not None)
        if len(value) != manifest["size"] or \
                hashlib.sha256(value).hexdigest() != manifest["sha256"]:
            return None
        return value

    def _ensure_topic(self) -> None:
        admin = AdminClient(self._kafka.client({"log_level": 2}))
        try:
            metadata = admin.list_topics(timeout=self._timeout_s)
        except KafkaException as e:
            raise StoreUnavailable(f"Kafka unavailable: {e.args[0]}") from e
        if self.topic in metadata.topics:
            return
        futures = admin.create_topics([NewTopic(
            self.topic, 1, 1, config={"cleanup.policy": "compact",
                                      "max.message.bytes": "1048588",
                                      "min.compaction.lag.ms": "0", **self._topic_config})])
        for f in futures.values():
            try:
                f.result(self._timeout_s)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise StoreUnavailable(f"cannot create {self.topic}: {e.args[0]}") from e
