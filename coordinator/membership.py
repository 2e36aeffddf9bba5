"""Processor membership by leases.

State per processor: REGISTERED (lease live) -> renewed by each heartbeat -> EXPIRED (no
heartbeat for the lease TTL) or LEFT (DELETE). Leases live in the metadata store
(namespace ``processors``), not in a replica's memory: a heartbeat reaching any replica
renews the stored lease (compare-and-set, so a lease the leader just expired is not
brought back), a restarted coordinator keeps them until they expire, and the leader reads
them all when it sweeps. The lease carries the task lags and stats of the last heartbeat,
so the leader sees lags reported to any replica. This replica's in-memory view is a cache
refreshed by :meth:`Membership.load` and by its own writes.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import secrets
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from coordinator.clock import Clock
from coordinator.errors import (
    Fenced,
    LeaseContended,
    LeaseTokenRequired,
    ProcessorConflict,
    UnknownProcessor,
)
from coordinator.store.metadata import MetadataStore, Versioned

NAMESPACE = "processors"


@dataclass(frozen=True, slots=True)
class ProcessorLease:
    """A live processor: where it runs and until when its lease holds."""

    processor_id: str
    location_id: str
    host: str | None
    registered_at: float
    expires_at: float
    task_lags: Mapping[str, int] = field(default_factory=dict, compare=False)
    stats: Mapping[str, Any] = field(default_factory=dict, compare=False)
    # SHA-256 of the lease token handed out at registration: only that incarnation of the
    # processor may heartbeat, ack, commit or leave as it (empty: a lease from before
    # tokens, which must register again)
    token_hash: str = field(default="", compare=False, repr=False)

    def to_bytes(self) -> bytes:
        """JSON for the metadata store."""
        return json.dumps({
            "processor_id": self.processor_id, "location_id": self.location_id,
            "host": self.host, "registered_at": self.registered_at,
            "expires_at": self.expires_at, "task_lags": dict(self.task_lags),
            "stats": dict(self.stats), "token_hash": self.token_hash},
            sort_keys=True).encode()

    def check_token(self, token: str | None) -> None:
        """Raise unless ``token`` is this incarnation's lease token."""
        if token is None:
            raise LeaseTokenRequired(
                f"processor {self.processor_id!r}: send the lease token of its registration "
                "(header Coxswain-Lease-Token)")
        if not self.token_hash:
            raise UnknownProcessor(f"processor {self.processor_id!r} registered before lease "
                                   "tokens existed; register again")
        if not hmac.compare_digest(_hash(token), self.token_hash):
            raise Fenced(f"processor {self.processor_id!r} registered again since this lease "
                         "token was issued: this incarnation is fenced")

    @staticmethod
    def from_bytes(raw: bytes) -> ProcessorLease:
        """Inverse of :meth:`to_bytes`."""
        data = json.loads(raw)
        return ProcessorLease(data["processor_id"], data["location_id"], data.get("host"),
                              float(data["registered_at"]), float(data["expires_at"]),
                              {k: int(v) for k, v in (data.get("task_lags") or {}).items()},
                              dict(data.get("stats") or {}), data.get("token_hash", ""))


def _fresher(cached: ProcessorLease | None, stored: ProcessorLease) -> ProcessorLease:
    """The cached lease when it is the stored one's incarnation renewed in memory since
    (a later expiry, newer lags and stats) or the one written (the same expiry: its lags
    keep their identity, which lets a generation skip re-checking them), else the stored
    one."""
    if cached is not None and cached.token_hash == stored.token_hash \
            and cached.registered_at == stored.registered_at \
            and cached.expires_at >= stored.expires_at:
        return cached
    return stored


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_processor_id() -> str:
    """A fresh processor id when a worker does not bring its own."""
    return f"processor-{uuid.uuid4().hex[:12]}"


class Membership:
    """Registered processors and their leases (the store's, cached here)."""

    def __init__(
        self,
        store: MetadataStore,
        clock: Clock,
        lease_ttl_s: float,
        id_factory: Callable[[], str] = new_processor_id,
        renews_in_memory: Callable[[], bool] = lambda: False,
    ) -> None:
        """``renews_in_memory()`` says whether this replica decides expiries now (it is
        the leader): then :meth:`renew_cached` renews in memory between writes. Any other
        replica writes every heartbeat's renewal through, for the leader to read."""
        self._renews_in_memory = renews_in_memory
        self._store = store
        self._clock = clock
        self._ttl = lease_ttl_s
        self._new_id = id_factory
        self._leases: dict[str, ProcessorLease] = {}
        # per processor, its stored record's (version, expiry) as last read or written
        # here: a renewal is written through only when that expiry holds for less than
        # half a TTL, and first tried as a compare-and-set on that version (no read)
        self._stored: dict[str, tuple[int, float]] = {}
        # Every change of a processor's cached lease takes the next number, and a snapshot
        # of the store (read without the coordinator's lock: 1000 leases take ZooKeeper
        # a good part of a second) takes one before it reads: merging the snapshot leaves
        # alone the processors changed here after it was taken.
        self._numbers = itertools.count(1)
        self._changed_at: dict[str, int] = {}
        # Store I/O runs outside it; the cache changes under it. Heartbeats are written
        # through without the coordinator's lock (each is a store round trip: 200 a second
        # on ZooKeeper kept that lock busy and delayed rebalances by seconds), so a
        # write's or a read's result goes into the cache only if no other change of that
        # processor (a removal above all) came in between.
        self._mutex = threading.Lock()

    @property
    def lease_ttl_s(self) -> float:
        """How long a lease holds without a heartbeat."""
        return self._ttl

    def load(self) -> None:
        """Refresh the cache from the store (every lease, whichever replica wrote it)."""
        self.merge(*self.snapshot())

    def snapshot(self, due_within_s: float | None = None
                 ) -> tuple[int, dict[str, Versioned], frozenset[str]]:
        """Stored lease records, the number that orders the read among this cache's
        changes, and the processors whose record was left unread (for :meth:`merge`).
        Safe to call while the cache changes.

        Every record is read unless ``due_within_s`` is given. Then only the records this
        cache lacks are read, and those whose cached lease runs out within
        ``due_within_s``: the leases this replica renews in memory stay as cached. Before
        a lease expires here its record has been read again, so a renewal through another
        replica is still seen in time. Reading 1000 leases from ZooKeeper took 110 ms of
        CPU, every second. When more than a quarter are due, every record is read at
        once."""
        taken = next(self._numbers)
        if due_within_s is None:
            return taken, self._store.list(NAMESPACE), frozenset()
        keys = self._store.keys(NAMESPACE)
        horizon = self._clock.now() + due_within_s
        with self._mutex:
            cached = self._leases
            due = [pid for pid in keys
                   if (lease := cached.get(pid)) is None or lease.expires_at < horizon]
        if len(due) * 4 > len(keys):
            return taken, self._store.list(NAMESPACE), frozenset()
        stored: dict[str, Versioned] = {}
        for pid in due:
            found = self._store.get(NAMESPACE, pid)
            if found is not None:  # (None: removed meanwhile)
                stored[pid] = found
        return taken, stored, frozenset(keys).difference(due)

    def merge(self, taken: int, stored: Mapping[str, Versioned],
              unread: frozenset[str] = frozenset()) -> None:
        """Refresh the cache from a :meth:`snapshot`. A lease this replica renewed in
        memory since its record was written (the same incarnation, a later expiry) keeps
        its fresher expiry, lags and stats; a processor whose lease changed here after the
        snapshot was taken (registered, renewed, removed) is left as it is now; one whose
        record is ``unread`` (still stored, not read this time) keeps its cached lease.
        Any other processor not in ``stored`` is gone."""
        # parsed first: the event loop may wait for the mutex (renewals in memory)
        parsed = {pid: (v.version, ProcessorLease.from_bytes(v.value))
                  for pid, v in stored.items()}
        with self._mutex:
            cached = self._leases
            recent = {pid for pid, n in self._changed_at.items() if n > taken}
            leases: dict[str, ProcessorLease] = {pid: cached[pid] for pid in recent
                                                 if pid in cached}
            for pid in unread:
                if pid not in recent and pid in cached:
                    leases[pid] = cached[pid]
            for pid, (version, lease) in parsed.items():
                if pid in recent:
                    continue
                self._stored[pid] = (version, lease.expires_at)
                leases[pid] = _fresher(cached.get(pid), lease)
            for pid in self._stored.keys() - leases.keys():
                del self._stored[pid]
            self._leases = leases
            self._changed_at = {pid: self._changed_at[pid] for pid in recent}

    def _changed(self, pid: str) -> None:
        self._changed_at[pid] = next(self._numbers)

    def live(self) -> Mapping[str, ProcessorLease]:
        """Processors whose lease has not been expired by :meth:`expire` or left."""
        return dict(self._leases)

    def locations(self) -> dict[str, str]:
        """processor id -> location id, for every registered processor."""
        return {pid: lease.location_id for pid, lease in sorted(self._leases.items())}

    def task_lags(self) -> dict[str, Mapping[str, int]]:
        """processor id -> task lags from its last heartbeat (the leases' own mappings,
        never changed once made: a generation reads 100k of them without copying)."""
        return {pid: lease.task_lags for pid, lease in self._leases.items()
                if lease.task_lags}

    def stats(self) -> dict[str, dict[str, Any]]:
        """processor id -> stats from its last heartbeat."""
        return {pid: dict(lease.stats) for pid, lease in self._leases.items() if lease.stats}

    def register(
        self, processor_id: str | None, location_id: str, host: str | None
    ) -> tuple[ProcessorLease, bool, str]:
        """Register (or re-register) a processor; returns its lease, whether it is new,
        and the lease token of this incarnation (new at each registration: an earlier
        incarnation's token is fenced from now on).

        Raises:
            ProcessorConflict: the id is live at another location.
        """
        now = self._clock.now()
        pid = processor_id or self._new_id()
        token = secrets.token_urlsafe(24)
        stored = self._read(pid)
        if stored is not None and stored[0].expires_at > now:
            current, version = stored
            if current.location_id != location_id:
                raise ProcessorConflict(
                    f"processor {pid!r} is live at location {current.location_id!r}, "
                    f"not {location_id!r}")
            lease = replace(current, host=host or current.host, expires_at=now + self._ttl,
                            token_hash=_hash(token))
            if self._write(lease, version):
                return lease, False, token
        lease = ProcessorLease(pid, location_id, host, now, now + self._ttl,
                               token_hash=_hash(token))
        version = self._store.put(NAMESPACE, pid, lease.to_bytes())
        with self._mutex:
            self._stored[pid] = (version, lease.expires_at)
            self._leases[pid] = lease
            self._changed(pid)
        return lease, True, token

    def heartbeat(
        self,
        processor_id: str,
        token: str | None,
        task_lags: Mapping[str, int] | None = None,
        stats: Mapping[str, Any] | None = None,
    ) -> ProcessorLease:
        """Renew a lease and record lags and stats.

        A lease ends when the leader expires it (it removes the record), not when its
        stored expiry passes: heartbeats missed while the store or the leader was
        unreachable (an outage, a restart of the coordinator) must not cost a live worker
        its lease, so a heartbeat renews any lease still stored. The compare-and-set
        keeps a lease the leader removed meanwhile from coming back.

        Raises:
            UnknownProcessor: not registered, or the leader expired or removed it.
        """
        cached, known = self._leases.get(processor_id), self._stored.get(processor_id)
        if cached is not None and known is not None and token is not None \
                and cached.token_hash and hmac.compare_digest(_hash(token), cached.token_hash):
            # one statement instead of two: a record changed since (another replica, the
            # leader's removal) fails the compare-and-set and is read below
            lease = self._renewed(cached, self._clock.now(), task_lags, stats)
            if self._write(lease, known[0]):
                return lease
        for _ in range(5):
            now = self._clock.now()
            stored = self._read(processor_id)
            if stored is None:
                raise UnknownProcessor(
                    f"processor {processor_id!r} is not registered or its lease expired; "
                    "register again")
            current, version = stored
            current.check_token(token)
            lease = self._renewed(current, now, task_lags, stats)
            if self._write(lease, version):
                return lease
        # other replicas kept writing this lease (or the leader removed it): not proof
        # that the processor is gone, so the worker is told to retry, not to stop
        raise LeaseContended(f"processor {processor_id!r}: its lease kept changing under "
                             "concurrent writes; retry the heartbeat")

    def renew_cached(
        self,
        processor_id: str,
        token: str | None,
        task_lags: Mapping[str, int] | None = None,
        stats: Mapping[str, Any] | None = None,
    ) -> tuple[ProcessorLease, bool] | None:
        """A heartbeat's renewal in the leader's memory, and whether its stored record is
        due to be written (it holds for less than half a TTL: :meth:`write_behind`, which
        the caller need not wait for); None when the heartbeat must go to the store
        (:meth:`heartbeat`): not the leader, a processor or token this cache does not know.

        At 1000 processors every 2 s, writing each renewal cost the coordinator most of a
        core (on ZooKeeper, the queue of writes also delayed rebalances by seconds). Only
        the leader expires leases, and it decides from its own view, where a renewal in
        memory is never replaced by an older stored record (:meth:`load` and every read
        keep the fresher one); a new or restarted leader grants every stored lease a full
        TTL before it expires any: so a dead processor still expires one TTL after its last
        heartbeat, and a live one never does. The stored record stays at least half a TTL
        minus a heartbeat interval (and the write's batching delay) ahead of now, and its
        lags and stats are those of the last write-through (what other replicas show until
        then).

        The renewal is in memory first even when a write is due: a slow store (ZooKeeper
        busy with a large write) must not expire, in the leader's own view, a processor
        whose heartbeats arrive."""
        if not self._renews_in_memory():
            return None
        lease = self._leases.get(processor_id)
        stored = self._stored.get(processor_id)
        if lease is None or stored is None or token is None or not lease.token_hash:
            return None
        if not hmac.compare_digest(_hash(token), lease.token_hash):
            return None  # another incarnation, maybe registered elsewhere: ask the store
        now = self._clock.now()
        renewed = self._renewed(lease, now, task_lags, stats)
        with self._mutex:
            if self._leases.get(processor_id) is not lease:
                return None  # changed meanwhile: the store decides
            self._leases[processor_id] = renewed
            self._changed(processor_id)
        return renewed, stored[1] - now < self._ttl / 2

    def write_behind(self, processor_id: str) -> ProcessorLease | None:
        """Write the leader's renewal of ``processor_id`` (from :meth:`renew_cached`) to
        the store: one compare-and-set on the cached version, else read and written
        again. None when the record is gone or another incarnation's (the cache then
        holds the store's view, which the processor's next heartbeat meets)."""
        for _ in range(3):
            lease, known = self._leases.get(processor_id), self._stored.get(processor_id)
            if lease is None:
                return None
            if known is not None and self._write(lease, known[0]):
                return lease
            found = self._read(processor_id)
            if found is None or found[0].token_hash != lease.token_hash:
                return None
            if self._write(found[0], found[1]):
                return found[0]
        return None

    def write_behind_many(self, processor_ids: Sequence[str]) -> int:
        """:meth:`write_behind` for several processors, their compare-and-sets on the
        cached versions sent together (one ZooKeeper transaction for a batch instead of
        two round trips each); the ones refused go through :meth:`write_behind` alone.
        Returns how many were written."""
        tried: dict[str, tuple[ProcessorLease, int | None]] = {}
        writes: dict[str, tuple[bytes, int]] = {}
        alone: list[str] = []
        for pid in processor_ids:
            lease, known = self._leases.get(pid), self._stored.get(pid)
            if lease is None:
                continue
            if known is None:
                alone.append(pid)
                continue
            tried[pid] = (lease, self._changed_at.get(pid))
            writes[pid] = (lease.to_bytes(), known[0])
        written = self._store.compare_and_set_many(NAMESPACE, writes) if writes else {}
        count = 0
        for pid, (lease, before) in tried.items():
            if self._took(lease, before, written.get(pid)):
                count += 1
            else:
                alone.append(pid)
        for pid in alone:
            if self.write_behind(pid) is not None:
                count += 1
        return count

    def _renewed(self, lease: ProcessorLease, now: float, task_lags: Mapping[str, int] | None,
                 stats: Mapping[str, Any] | None) -> ProcessorLease:
        # an unchanged report keeps its mapping (a generation skips re-checking it)
        same = task_lags is None or task_lags == lease.task_lags
        return replace(
            lease, expires_at=now + self._ttl,
            task_lags=lease.task_lags if same else dict(task_lags or {}),
            stats=lease.stats if stats is None else dict(stats))

    def require(self, processor_id: str, token: str | None) -> ProcessorLease:
        """The lease of ``processor_id`` if ``token`` is its incarnation's; else
        UnknownProcessor, LeaseTokenRequired or Fenced (the store is asked when this
        replica's cache does not know the processor or holds another token, as after a
        registration through another replica). As for heartbeats, a lease holds until the
        leader removes it."""
        lease = self._leases.get(processor_id)
        if lease is not None and token is not None and lease.token_hash \
                and hmac.compare_digest(_hash(token), lease.token_hash):
            return lease
        stored = self._read(processor_id)
        if stored is None:
            raise UnknownProcessor(f"processor {processor_id!r} is not registered")
        stored[0].check_token(token)
        return stored[0]

    def holds(self, processor_id: str, token: str) -> bool:
        """True if this replica's cache has ``processor_id`` with lease token ``token``
        (no store read: callers are on the event loop)."""
        lease = self._leases.get(processor_id)
        return lease is not None and bool(lease.token_hash) and hmac.compare_digest(
            _hash(token), lease.token_hash)

    def reload(self, processor_id: str) -> ProcessorLease | None:
        """The lease of ``processor_id`` as the store has it now (heartbeats through other
        replicas included), also refreshed in this replica's cache; None if gone."""
        stored = self._read(processor_id)  # which refreshes the cache
        return None if stored is None else stored[0]

    def leave(self, processor_id: str) -> bool:
        """Remove a processor now; True if it was registered."""
        existed = self._store.delete(NAMESPACE, processor_id)
        with self._mutex:
            existed = self._leases.pop(processor_id, None) is not None or existed
            self._stored.pop(processor_id, None)
            self._changed(processor_id)
        return existed

    def lease_of(self, processor_id: str) -> ProcessorLease | None:
        """This replica's view of a processor's lease (renewals in memory included)."""
        return self._leases.get(processor_id)

    def expired(self) -> list[str]:
        """Processors whose lease ran out, in id order (still registered until removed)."""
        now = self._clock.now()
        return sorted(pid for pid, lease in self._leases.items() if lease.expires_at <= now)

    def remove(self, processor_ids: list[str]) -> None:
        """Drop processors (expired, left, or silent at a barrier)."""
        for pid in processor_ids:
            # deleted, then dropped: a write through that lands before the delete is
            # deleted with it, one after it is refused (and keeps out of the cache)
            self._store.delete(NAMESPACE, pid)
            with self._mutex:
                self._leases.pop(pid, None)
                self._stored.pop(pid, None)
                self._changed(pid)

    def next_expiry(self) -> float | None:
        """The earliest lease expiry time, if any processor is registered."""
        return min((lease.expires_at for lease in self._leases.values()), default=None)

    def _read(self, pid: str) -> tuple[ProcessorLease, int] | None:
        before = self._changed_at.get(pid)
        found = self._store.get(NAMESPACE, pid)
        lease = None if found is None else ProcessorLease.from_bytes(found.value)
        with self._mutex:
            current = self._changed_at.get(pid) == before  # nothing came in between
            if found is None or lease is None:
                if current:
                    self._leases.pop(pid, None)
                    self._stored.pop(pid, None)
                    self._changed(pid)
                return None
            # the renewal in memory, if fresher, is what a write of this version carries on
            fresh = _fresher(self._leases.get(pid), lease)
            if current:
                self._stored[pid] = (found.version, lease.expires_at)
                self._leases[pid] = fresh
                self._changed(pid)
            return fresh, found.version

    def _write(self, lease: ProcessorLease, version: int) -> bool:
        pid = lease.processor_id
        before = self._changed_at.get(pid)
        written = self._store.compare_and_set(NAMESPACE, pid, lease.to_bytes(), version)
        return self._took(lease, before, written)

    def _took(self, lease: ProcessorLease, before: int | None, written: int | None) -> bool:
        """Whether the write of ``lease`` (begun when the processor's change number was
        ``before``; ``written`` the new version, None if refused) holds, and the cache
        updated for it."""
        if written is None:
            return False
        pid = lease.processor_id
        with self._mutex:
            if self._changed_at.get(pid) != before and pid not in self._leases:
                return False  # removed meanwhile: written before the delete, deleted
            # a renewal in memory since this write began is fresher: it stays
            self._leases[pid] = _fresher(self._leases.get(pid), lease)
            self._stored[pid] = (written, lease.expires_at)
            self._changed(pid)
        return True
