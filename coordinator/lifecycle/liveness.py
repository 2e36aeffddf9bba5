"""Which processors are alive, and the changes of it the leader reacts to: registrations,
heartbeats, leaves, long polls whose connection closed, and lease sweeps."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordinator.clock import Clock
from coordinator.errors import CoordinatorError, StoreUnavailable
from coordinator.leadership.role import LeaderRole
from coordinator.lifecycle.config import CoordinatorConfig, LifecycleObserver
from coordinator.membership import Membership, ProcessorLease
from coordinator.scheduler import Scheduler

log = logging.getLogger("coxswain.coordinator")

_WRITE_BEHIND_LINGER_S = 0.2


class Liveness:
    """Keeps the membership and turns its changes into triggers (``trigger(reason)``
    debounces a rebalance). Registrations, leaves, expiries and sweeps' merges run under
    the lifecycle's ``lock``, heartbeats without it (the membership's own mutex keeps its
    cache consistent); store I/O in worker threads."""

    def __init__(
        self,
        config: CoordinatorConfig,
        membership: Membership,
        leader: LeaderRole,
        clock: Clock,
        observer: LifecycleObserver,
        lock: asyncio.Lock,
        trigger: Callable[[str], None],
        task_names: Callable[[], frozenset[str]],
        after_sweep: Callable[[], None],
    ) -> None:
        """``task_names`` gives the latest job model's task names (lags of other names are
        dropped); ``after_sweep`` runs after each lease sweep."""
        self._config = config
        self.membership = membership
        self._leader = leader
        self._clock = clock
        self._observer = observer
        self._lock = lock
        # its own timers: a sweep waits for a store read (seconds while ZooKeeper is busy
        # with a large write), which must not hold up the lifecycle's rebalances
        self._timers = Scheduler()
        self._trigger = trigger
        self._task_names = task_names
        self._after_sweep = after_sweep
        # The processors this replica last reacted to. A heartbeat, poll or commit that
        # reaches this replica reads the lease of a processor another replica registered
        # into the cache; comparing the cache with this set (not with the cache before a
        # sweep) is what still turns that processor into a join.
        self._members_seen: frozenset[str] = frozenset()
        self._polls: dict[str, float] = {}  # processor -> its last job model request
        self._sweep_due = float("inf")  # when the next lease sweep should run (monotonic)
        self._store_lost_at: float | None = None  # when a sweep first found the store down
        self._full_ttl_since = clock.now()  # no lease expires before a TTL from this
        # Leases due to be written behind: one flush at a time takes all that are due
        # (those that come due while it writes wait for the next), as one batch of
        # compare-and-sets. Written one by one, 200 a second at 1000 processors cost
        # ZooKeeper's client a tenth of a core.
        self._due: set[str] = set()
        self._writing: frozenset[str] = frozenset()
        self._flush: asyncio.Task[None] | None = None

    async def stop(self) -> None:
        """Stop the sweeps and checks, and wait for the leases being written behind."""
        await self._timers.close()
        if self._flush is not None:
            await asyncio.gather(self._flush, return_exceptions=True)

    def grant_full_ttl(self) -> None:
        """Give every lease a full TTL from now before any expires (a new leader: heartbeats
        that reached no replica during the handover must not expire live processors)."""
        self._full_ttl_since = self._clock.now()

    def start(self) -> None:
        """Take the loaded membership as seen, and start the lease sweeps."""
        self.news()
        self._observer.processors_changed(len(self.membership.live()))
        self.schedule_sweep()

    async def register(
        self, processor_id: str | None, location_id: str, host: str | None
    ) -> tuple[ProcessorLease, bool, str]:
        """Register a processor; a new one triggers a (debounced) rebalance. Returns the
        lease, whether it is new, and the lease token of this incarnation."""
        async with self._lock:
            lease, created, token = await asyncio.to_thread(
                self.membership.register, processor_id, location_id, host)
        if created:
            self.news()
            self._observer.processors_changed(len(self.membership.live()))
            self._trigger("join")
        return lease, created, token

    async def heartbeat(
        self, processor_id: str, token: str | None, task_lags: Mapping[str, int] | None,
        stats: Mapping[str, Any] | None,
    ) -> ProcessorLease:
        """Renew a processor's lease and record its lags (UnknownProcessor once expired).
        Lags are kept only for tasks of the latest job model (the ones the next generation
        reads): a worker cannot fill the store, or the metrics, with invented names."""
        if task_lags is not None:
            known = self._task_names()
            task_lags = {t: lag for t, lag in task_lags.items() if t in known}
        # Not under the lifecycle's lock: the membership keeps its cache consistent with
        # concurrent sweeps and removals itself, and a write through is a store round
        # trip (on ZooKeeper, 200 a second kept the lock busy and delayed rebalances).
        renewed = self.membership.renew_cached(processor_id, token, task_lags, stats)
        if renewed is not None:  # renewed in memory: no store write, no thread hop
            lease, due = renewed
            if due:
                self._write_behind(processor_id)
            return lease
        return await asyncio.to_thread(
            self.membership.heartbeat, processor_id, token, task_lags, stats)

    def _write_behind(self, processor_id: str) -> None:
        """Write a leader's renewal to the store without holding the heartbeat's answer
        (one write in flight per processor; a failed one is tried again at the next
        heartbeat, the stored record still holding for up to half a TTL)."""
        if processor_id in self._writing:
            return
        self._due.add(processor_id)
        if self._flush is None:
            self._flush = asyncio.get_running_loop().create_task(self._write_leases())

    async def _write_leases(self) -> None:
        try:
            while self._due:
                # gathers what comes due meanwhile (a linger, as a Kafka producer's):
                # the stored record holds for half a TTL yet, a batch is one round trip
                await asyncio.sleep(_WRITE_BEHIND_LINGER_S)
                self._writing, self._due = frozenset(self._due), set()
                try:
                    await asyncio.to_thread(self.membership.write_behind_many,
                                            sorted(self._writing))
                except CoordinatorError as e:
                    log.debug("%d leases not written behind: %s", len(self._writing), e)
                except Exception:
                    log.exception("%d leases not written behind", len(self._writing))
        finally:
            self._writing, self._flush = frozenset(), None

    async def leave(self, processor_id: str) -> bool:
        """A processor leaves now; a rebalance follows."""
        async with self._lock:
            left = await asyncio.to_thread(self.membership.leave, processor_id)
        if left:
            self.news()
            self._observer.processors_changed(len(self.membership.live()))
            self._trigger("leave")
        return left

    async def drop(self, processor_ids: Sequence[str]) -> None:
        """Remove processors (the caller holds the lock and triggers what follows)."""
        await asyncio.to_thread(self.membership.remove, list(processor_ids))
        self.news()
        self._observer.processors_changed(len(self.membership.live()))

    # -- closed long polls

    def poll_seen(self, processor_id: str) -> None:
        """A job model request of ``processor_id`` arrived: a sign of life between its
        heartbeats (what a closed long poll is weighed against)."""
        self._polls[processor_id] = self._clock.now()

    def poll_closed(self, processor_id: str) -> None:
        """The connection of a long poll of ``processor_id`` (its current incarnation:
        the caller checked the lease token) closed before its answer. A worker killed with
        kill -9, or whose host died, closes its connections at once, long before its lease
        runs out; one that lost a connection retries at once (and heartbeats, so a switch
        to another replica shows too). So unless it shows life within the grace, it leaves
        now. Only the leader acts (followers' polls fall back to the lease)."""
        grace = self._config.poll_close_grace_s
        if grace <= 0 or not self._leader.is_leader() \
                or processor_id not in self.membership.live():
            return
        closed_at = self._clock.now()
        self._timers.schedule(f"poll-closed:{processor_id}", grace,
                       lambda: self._poll_close_check(processor_id, closed_at))

    async def _poll_close_check(self, processor_id: str, closed_at: float) -> None:
        if self._polls.get(processor_id, float("-inf")) > closed_at \
                or not self._leader.is_leader():
            return
        async with self._lock:
            cached = self.membership.lease_of(processor_id)
            if cached is not None and \
                    cached.expires_at - self.membership.lease_ttl_s > closed_at:
                return  # it heartbeat here since (perhaps renewed in memory only)
            lease = await asyncio.to_thread(self.membership.reload, processor_id)
            if lease is None:
                return  # gone already (left, expired)
            renewed_at = lease.expires_at - self.membership.lease_ttl_s
            if renewed_at > closed_at or self._polls.get(processor_id, 0.0) > closed_at:
                return  # it heartbeat (through any replica) or polled again: alive
            await asyncio.to_thread(self.membership.remove, [processor_id])
            self.news()
        self._polls.pop(processor_id, None)
        self._observer.processors_changed(len(self.membership.live()))
        log.info("processor %s: long poll closed and no sign of life for %.1fs: left",
                 processor_id, self._clock.now() - closed_at,
                 extra={"reason": "poll_closed"})
        self._trigger("poll_closed")

    # -- lease sweeps

    async def sweep(self) -> None:
        """Every replica refreshes its view of the leases (heartbeats reach any replica;
        not the sole replica of an embedded store, whose cache sees every change); the
        leader also expires leases and reacts to processors that joined or left through
        other replicas."""
        try:
            # the store is read without the lock (1000 leases take ZooKeeper a good part
            # of a second, which heartbeats and rebalances must not wait for)
            snapshot = None if self._config.sole_replica else await asyncio.to_thread(
                self.membership.snapshot, self.membership.lease_ttl_s / 2)
            async with self._lock:
                if snapshot is not None:
                    await asyncio.to_thread(self.membership.merge, *snapshot)
                if self._store_lost_at is not None:
                    # Heartbeats could not be written while the store was unreachable: as
                    # after a handover, every lease gets a full TTL from now before any
                    # expires, so an outage costs no live worker its tasks.
                    log.warning("store reachable again after %.1fs: every lease renewed "
                                "for a full TTL", self._clock.now() - self._store_lost_at,
                                extra={"reason": "store_recovered"})
                    self._store_lost_at = None
                    self.grant_full_ttl()
                expired: list[str] = []
                # A sweep that runs a heartbeat interval late found this process stalled
                # (a long pause, a starved event loop): the heartbeats of that time are
                # still unread in their sockets, so no lease expires before they are read
                # (the next sweep, on time, expires the ones that really ran out).
                late = self._clock.monotonic() - self._sweep_due
                stalled = late > self._config.heartbeat_interval_s
                leading = self._leader.is_leader()
                if stalled and leading:
                    log.warning("lease sweep %.1fs late (this coordinator was stalled): "
                                "expiring no lease before the heartbeats of that time are "
                                "read", late, extra={"reason": "sweep_late"})
                if leading and not stalled and \
                        self._clock.now() >= self._full_ttl_since + self._config.lease_ttl_s:
                    expired = self.membership.expired()
                    if expired:
                        await asyncio.to_thread(self.membership.remove, expired)
                joined, left = self.news()
            self._after_sweep()
            if joined or left:
                self._observer.processors_changed(len(self.membership.live()))
            if expired:
                log.info("leases expired: %s", ", ".join(expired),
                         extra={"reason": "lease_expired"})
                self._trigger("lease_expired")
            elif joined:
                self._trigger("join")
            elif left:
                self._trigger("leave")
        except StoreUnavailable as e:
            if self._store_lost_at is None:
                self._store_lost_at = self._clock.now()
                log.warning("lease sweep skipped, store unreachable: %s", e)
        except CoordinatorError as e:
            log.warning("lease sweep skipped: %s", e)
        finally:
            self.schedule_sweep()

    def news(self) -> tuple[frozenset[str], frozenset[str]]:
        """Processors that joined and left since this replica last reacted to its
        membership, whatever brought them into or out of its cache."""
        live = frozenset(self.membership.live())
        joined, left = live - self._members_seen, self._members_seen - live
        self._members_seen = live
        for pid in left:  # its polls no longer matter (and ids must not pile up)
            self._polls.pop(pid, None)
        return joined, left

    def schedule_sweep(self) -> None:
        """Refresh at most once a second (a sweep reads every lease), but on the leader
        wake right when the next known lease runs out: worker failover should cost the
        lease TTL, not the TTL plus a sweep period."""
        interval = min(1.0, self._config.lease_ttl_s / 4)
        expiry = self.membership.next_expiry()
        if expiry is not None and self._leader.is_leader():
            interval = min(interval, max(0.02, expiry - self._clock.now() + 0.01))
        self._sweep_due = self._clock.monotonic() + interval
        self._timers.schedule("lease-sweep", interval, self.sweep)
