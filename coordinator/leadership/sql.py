"""One leader per shared SQL store without ZooKeeper: a leadership lease and an epoch in
the store itself.

Two coordinators on one PostgreSQL database (no ``--zk``) would otherwise both lead. Keys
of the metadata store:

* ``leader/lease``: ``{"holder", "expiresAt"}``, taken by compare-and-set when absent or
  expired, renewed by its holder every quarter of the TTL (compare-and-set on its version:
  a renewal never overwrites a lease somebody else took);
* ``leader/epoch``: written once by each new holder; its store version is the epoch, and
  every job-model publication checks it in the same transaction (``fence``), so a deposed
  leader (a paused process whose lease expired and was taken) can never publish.

A process that finds the lease held waits for it to run out (a crashed holder's lease
expires within one TTL, so a restart after kill -9 is never refused); if the holder keeps
renewing it, the process refuses to start with a message naming the holder. A leader that
cannot renew in time stops leading at once (``is_leader`` turns False from its own clock,
before anyone else may take the lease) and is told through ``on_lost``; the service then
shuts down, since a single-store coordinator has no follower mode.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from coordinator.errors import CoordinatorError
from coordinator.store.metadata import Fence, MetadataStore

log = logging.getLogger("coxswain.leader")

NAMESPACE = "leader"


class LeadershipHeld(CoordinatorError):
    """Another live coordinator holds the store's leadership lease."""

    code = "leadership_held"


class SqlLeaseLeader:
    """The leader role of a coordinator on a shared SQL store (see the module doc)."""

    def __init__(self, store: MetadataStore, replica_id: str, ttl_s: float,
                 on_lost: Callable[[], None] = lambda: None,
                 on_change: Callable[[bool], None] = lambda _: None,
                 wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._replica_id = replica_id
        self._ttl = ttl_s
        self._on_lost = on_lost
        self._on_change = on_change
        self._reported = False  # what on_change last said
        self._wall, self._mono = wall, mono
        self._lease_version: int | None = None
        self._epoch = 0
        self._valid_until = 0.0  # monotonic: beyond it this process no longer leads
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- LeaderRole

    @property
    def replica_id(self) -> str:
        """This replica's id."""
        return self._replica_id

    def is_leader(self) -> bool:
        """True while this process holds a lease it renewed within the TTL (its own clock:
        it stops leading before the lease can expire in the store)."""
        return self._lease_version is not None and self._mono() < self._valid_until

    def leader_id(self) -> str | None:
        """This replica while it leads (the embedded mode has no followers)."""
        return self._replica_id if self.is_leader() else None

    @property
    def epoch(self) -> int:
        """The store version of ``leader/epoch`` this process wrote when it took over."""
        return self._epoch

    def fence(self) -> Fence | None:
        """The epoch, checked in the transaction of every publication."""
        return Fence(NAMESPACE, "epoch", self._epoch)

    def set_on_change(self, on_change: Callable[[bool], None]) -> None:
        """Who hears when leadership lapses (store unreachable past the TTL) or resumes."""
        self._on_change = on_change

    def serves_commits(self) -> bool:
        """Only while leading: a paused process whose lease lapsed must not accept a
        commit that its successor would fence."""
        return self.is_leader()

    # -- taking and keeping the lease

    def acquire(self, wait_s: float | None = None) -> None:
        """Take the lease, waiting for a holder's lease to run out (at most ``wait_s``,
        default a TTL and a half); ``LeadershipHeld`` when its holder keeps renewing it."""
        deadline = self._mono() + (wait_s if wait_s is not None else self._ttl * 1.5)
        announced = False
        while True:
            found = self._store.get(NAMESPACE, "lease")
            holder, expires_at = _parse(found.value) if found is not None else (None, 0.0)
            now = self._wall()
            if found is None or expires_at <= now or holder == self._replica_id:
                started = self._mono()
                version = self._store.compare_and_set(
                    NAMESPACE, "lease", _lease(self._replica_id, now + self._ttl),
                    None if found is None else found.version)
                if version is not None:
                    self._lease_version = version
                    self._valid_until = started + self._ttl
                    self._epoch = self._store.put(NAMESPACE, "epoch",
                                                  self._replica_id.encode())
                    log.info("took the store's leadership lease (epoch %d)", self._epoch)
                    self._reported = True
                    return
                continue  # somebody else took it meanwhile: look again
            if self._mono() >= deadline:
                raise LeadershipHeld(
                    f"coordinator {holder!r} leads this store and keeps renewing its lease: "
                    "one coordinator per store without ZooKeeper (stop it, or run replicas "
                    "with --zk for high availability)")
            if not announced:
                log.warning("coordinator %r holds the store's leadership lease for %.1fs "
                            "more: waiting for it to run out", holder, expires_at - now)
                announced = True
            time.sleep(min(0.25, max(0.01, expires_at - now)))

    def start(self) -> None:
        """Renew the lease in the background until :meth:`stop`."""
        self._thread = threading.Thread(target=self._renew_loop, name="leader-lease",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and give the lease up, so a successor need not wait it out."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        version = self._lease_version
        self._lease_version = None
        if version is not None:
            try:  # expire it now (compare-and-set: only if it is still ours)
                self._store.compare_and_set(NAMESPACE, "lease", _lease(self._replica_id, 0.0),
                                            version)
            except CoordinatorError as e:
                log.warning("could not give the leadership lease up: %s", e)

    def renew(self) -> bool:
        """Renew once; False when the lease was taken by another coordinator (then
        ``on_lost`` was called). While the store is unreachable the lease cannot be
        renewed: this process stops leading when its TTL runs out and leads again if its
        lease is still unclaimed once the store answers (``on_change`` says both)."""
        version = self._lease_version
        if version is None:
            return False
        started = self._mono()
        try:
            renewed = self._store.compare_and_set(
                NAMESPACE, "lease", _lease(self._replica_id, self._wall() + self._ttl), version)
        except CoordinatorError as e:
            log.warning("leadership lease not renewed (%s); %s", e,
                        f"leading for {self._valid_until - self._mono():.1f}s more at most"
                        if self.is_leader() else "not leading until it is")
            self._report()
            return True
        if renewed is None:
            self._lease_version = None
            log.error("another coordinator took the store's leadership lease: this one stops")
            self._report()
            self._on_lost()
            return False
        self._lease_version = renewed
        self._valid_until = started + self._ttl
        self._report()
        return True

    def _report(self) -> None:
        leading = self.is_leader()
        if leading != self._reported:
            self._reported = leading
            self._on_change(leading)

    def _renew_loop(self) -> None:
        while not self._stop.wait(self._ttl / 4):
            if not self.renew():
                return


def _lease(holder: str, expires_at: float) -> bytes:
    return json.dumps({"holder": holder, "expiresAt": expires_at}).encode()


def _parse(raw: bytes) -> tuple[str | None, float]:
    data = json.loads(raw)
    return data.get("holder"), float(data.get("expiresAt", 0.0))
