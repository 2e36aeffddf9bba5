"""The barrier of the latest version: acks, completion and timeout.

Any replica takes acks: each is written into the barrier in the store by compare-and-set,
together with the acks that arrived meanwhile (``AckGroup``). The ack that completes the
barrier makes the version active: its task localities are recorded (host affinity for
the next generation) and the active pointer is stored. On the leader, a barrier still
pending at its timeout is extended for participants that heartbeat and report handing
over (``handing_over``), up to the barrier's maximum; past that the silent participants
are dropped and a new version is generated without them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from coordinator.ack_group import AckGroup
from coordinator.barrier import Barrier, BarrierRepository, BarrierState
from coordinator.clock import Clock
from coordinator.job_models import JobModelRepository
from coordinator.leadership.role import LeaderRole
from coordinator.lifecycle.config import CoordinatorConfig, LifecycleObserver
from coordinator.lifecycle.fencing import CommitFence
from coordinator.lifecycle.handing_over import handing_over
from coordinator.lifecycle.liveness import Liveness
from coordinator.lifecycle.versions import Versions
from coordinator.locality import TASK_HOSTS, LocalityWriter, reported_locations
from coordinator.membership import Membership
from grouping.model import JobModel

log = logging.getLogger("coxswain.coordinator")
#: seconds after a barrier ends before the leader indexes the model for the next change,
#: unless another version came meanwhile (changes in a row need not wait for it)
INDEX_WHEN_IDLE_S = 2.0

Schedule = Callable[[str, float, Callable[[], Awaitable[None]]], None]


class BarrierKeeper:
    """Acks, completion and timeout of the latest version's barrier (see the module)."""

    def __init__(
        self,
        config: CoordinatorConfig,
        versions: Versions,
        models: JobModelRepository,
        barriers: BarrierRepository,
        lock: asyncio.Lock,
        leader: LeaderRole,
        clock: Clock,
        observer: LifecycleObserver,
        membership: Membership,
        liveness: Liveness,
        locality_writes: LocalityWriter,
        fence: CommitFence,
        schedule: Schedule,
        cancel: Callable[[str], None],
        rebalance: Callable[[str], Awaitable[object]],
        index_for_next: Callable[[JobModel], Awaitable[None]],
    ) -> None:
        """``lock`` is the lifecycle's (state changes); ``schedule``/``cancel`` its timers;
        ``rebalance(reason)`` generates a version (after a timeout);
        ``index_for_next(model)`` indexes an active model for the next generation."""
        self._config = config
        self._versions = versions
        self._models = models
        self._barriers = barriers
        self._lock = lock
        self._leader = leader
        self._clock = clock
        self._observer = observer
        self._membership = membership
        self._liveness = liveness
        self._locality_writes = locality_writes
        self._fence = fence
        self._schedule = schedule
        self._cancel = cancel
        self._rebalance = rebalance
        self._index_for_next = index_for_next
        self._acks = AckGroup(self._write_acks)  # acks written together (group commit)
        #: task -> location, as last recorded (a generation's host-affinity hints)
        self.known_locality: dict[str, str] = {}

    # ------------------------------------------------------------------ acks

    async def ack(self, version: int, processor_id: str) -> BarrierState:
        """A processor acknowledges ``version`` (it stopped and committed what it loses).
        An ack that finds the barrier done answers once the new task localities are
        stored."""
        updated = await self._acks.ack(version, processor_id)
        state = await self._take_ack(version, updated)
        if state is BarrierState.DONE:
            if self._versions.active_before(version):
                # a refresh saw the barrier done first and is recording the version (under
                # the lock): its localities are queued only once that is over
                async with self._lock:
                    pass
            await self._locality_writes.flush()
        return state

    async def _take_ack(self, version: int, updated: Barrier) -> BarrierState:
        # Most acks only add to a pending barrier's acked set: applied at once, without
        # the lock (nothing is awaited in between, so no state change interleaves). A
        # thousand acks per rebalance queued on the lock, one event-loop iteration per
        # hand-over, and registrations and leaves waited behind them. The ack that
        # completes the barrier takes the lock: it records the active version.
        state = self._apply_ack(version, updated)
        if state is not None:
            return state
        async with self._lock:
            state = self._apply_ack(version, updated)  # again: it may have changed since
            if state is not None:
                return state
            v = self._versions
            changed = updated != v.barrier
            v.barrier = updated
            if self._leader.is_leader():
                await self.done(updated)
            else:
                v.active = v.latest  # the leader records it (it watches the barrier)
            if changed:
                v.notify()
            return updated.state

    def _apply_ack(self, version: int, updated: Barrier) -> BarrierState | None:
        """Take in the barrier as an ack stored it, when that records nothing; None when it
        completes the barrier of the latest version (for :meth:`_take_ack` to record)."""
        v = self._versions
        latest = v.latest
        if latest is None or latest.version != version:
            return updated.state  # superseded (or not seen here yet)
        current = v.barrier
        if current is not None and current.version == version and (
                current.state is not BarrierState.PENDING
                or len(current.acked) > len(updated.acked)):
            return current.state  # a later write of this barrier was seen already
        if updated.state is BarrierState.DONE and v.active_before(version):
            return None
        if updated != current:
            v.barrier = updated
            v.notify()
        return updated.state

    async def _write_acks(self, version: int, processor_ids: list[str]
                          ) -> tuple[Barrier | None, frozenset[str]]:
        """Store the acks of ``processor_ids`` in ``version``'s barrier (those that are
        its participants); returns the stored barrier and the others."""
        now = self._clock.now()
        ids = frozenset(processor_ids)
        strangers: frozenset[str] = frozenset()

        def acked(b: Barrier) -> Barrier:
            nonlocal strangers
            strangers = ids - b.participants
            return b.ack_many(ids - strangers, now)

        updated = await asyncio.to_thread(self._barriers.update, version, acked)
        return updated, strangers

    # ------------------------------------------------------------------ its end

    async def done(self, barrier: Barrier) -> None:
        """Record the latest version as active: its barrier completed (the caller holds
        the lock)."""
        model = self._versions.latest
        assert model is not None and model.version == barrier.version
        self._cancel("barrier-timeout")
        known = self.known_locality
        # a task whose owner reports the host its state is on (its executor's, on a
        # Spark cluster) is located there rather than at its processor's location
        stats = self._membership.stats()
        reporting = {pid: [t.name for t in c.active_tasks]
                     for pid, c in model.containers.items() if TASK_HOSTS in stats.get(pid, {})}

        # outcomes older than any model still kept
        self._fence.forget_before(barrier.version - 2 * self._config.keep_job_models)

        def persist() -> tuple[dict[str, str], dict[str, str]]:
            self._models.set_active(barrier.version)
            self._barriers.prune(barrier.version - self._config.keep_job_models)
            # here too, not on the event loop: 200k tasks after a factor change
            locality = model.task_locations()
            locality.update(reported_locations(reporting, stats))
            return locality, {**known, **locality}

        locality, self.known_locality = await asyncio.to_thread(persist)
        # localities are host-affinity hints: written in the background (a crash before
        # they are stored costs the tasks' affinity after a restart, nothing else); the
        # ack that completes the barrier answers once they are stored
        self._locality_writes.write(locality, known)
        self._versions.active = model
        # the next full generation reads this model's lineage index: built once the leader
        # has been idle a while, not at the next change's trigger (nor beside the fetches
        # and acks of this version, or of a next one that follows at once)
        self._schedule("index-model", INDEX_WHEN_IDLE_S, lambda: self._index_for_next(model))
        waited = (barrier.ended_at or barrier.started_at) - barrier.started_at
        self._observer.barrier_ended(barrier.state.value, waited)
        log.info("barrier of version %d done", barrier.version,
                 extra={"version": barrier.version, "reason": "barrier_done"})

    async def timeout(self, version: int) -> None:
        """The barrier of ``version`` is due (leader only): extended for participants
        still handing over, else timed out, its silent participants dropped, and a new
        version generated without them."""
        if not self._leader.is_leader():
            return
        async with self._lock:
            v = self._versions
            barrier = v.barrier
            if barrier is None or barrier.version != version:
                return
            now = self._clock.now()
            if barrier.state is BarrierState.PENDING and self._extend(barrier, now):
                return
            timed_out = await asyncio.to_thread(
                self._barriers.update, version, lambda b: b.time_out(now))
            if timed_out is None or timed_out.state is not BarrierState.TIMED_OUT:
                return  # completed meanwhile through another replica
            v.barrier = timed_out
            silent = sorted(timed_out.silent)
            await self._liveness.drop(silent)
            self._observer.barrier_ended(timed_out.state.value,
                                         self._config.barrier_timeout_s)
            log.warning("barrier of version %d timed out; dropping silent processors: %s",
                        version, ", ".join(silent),
                        extra={"version": version, "reason": "barrier_timeout"})
            v.notify()
        await self._rebalance("barrier_timeout")

    def _extend(self, barrier: Barrier, now: float) -> bool:
        """Whether the pending ``barrier`` waits on (its next check scheduled): some
        silent participant heartbeats and reports handing over, and the barrier's
        maximum has not passed."""
        config = self._config
        left = barrier.started_at + config.barrier_max_s - now
        if left <= 0:
            return False
        window = min(config.lease_ttl_s, 3 * config.heartbeat_interval_s)
        alive = handing_over(barrier, self._membership.live(), now, config.lease_ttl_s,
                             window)
        if not alive:
            return False
        wait = min(config.barrier_timeout_s, left)
        log.warning("barrier of version %d extended %.0fs (at most %.0fs more): %s still "
                    "handing over", barrier.version, wait, left, ", ".join(
                        f"{pid} ({r.get('tasks', '?')} tasks)" for pid, r in alive.items()),
                    extra={"version": barrier.version, "reason": "barrier_extended"})
        self._schedule("barrier-timeout", wait, lambda: self.timeout(barrier.version))
        return True
