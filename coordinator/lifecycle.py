"""The job-model lifecycle: membership, rebalances, versions, barriers, fencing.

State diagram of a version V::

    (trigger) --debounce--> GENERATE --publish(CAS)--> V pending --all acked--> V done
                                                        |                       (active)
                                                        +--barrier timeout--> V timedOut
                                                                |
                                                                +--> regenerate without
                                                                     the silent processors

Triggers: a processor joins, leaves or its lease expires (trailing-edge debounce), ``/scale``
(immediate), a changed input partition set, the probing-rebalance timer (only while the
assignment asks for it), and a barrier timeout. Only the leader acts; every publication is
a compare-and-set on the version pointer, so versions only go up and a deposed leader's
attempt is refused.

All state changes run on the event loop under one lock; store I/O and job-model generation
run in worker threads so that long polls and heartbeats keep being served meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from checkpoint.model import ResetPolicy
from coordinator.ack_group import AckGroup
from coordinator.barrier import NAMESPACE as BARRIERS
from coordinator.barrier import Barrier, BarrierRepository, BarrierState
from coordinator.clock import Clock
from coordinator.errors import (
    CoordinatorError,
    Fenced,
    NotLeader,
    StoreUnavailable,
)
from coordinator.job_models import VERSIONS, JobModelRepository
from coordinator.leader import LeaderRole
from coordinator.locality import CONFIG, DesiredConfig, TaskLocality
from coordinator.membership import Membership, ProcessorLease
from coordinator.model_cache import ModelCache
from coordinator.scheduler import Scheduler
from coordinator.store.metadata import MetadataStore
from grouping.assignment import AssignmentParams
from grouping.generation import GeneratedJobModel
from grouping.groupers import grouper_by_name
from grouping.incremental import JobModelGenerator
from grouping.key_bucket import DEFAULT_MAX_ELASTICITY_FACTOR, validate_elasticity_factor
from grouping.model import JobModel, SystemStreamPartition
from grouping.shards import CONFIG_KEY as SHARDS
from grouping.shards import Shard, lineage_of_config, lineage_to_config

log = logging.getLogger("coxswain.coordinator")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Everything the lifecycle is configured with (times in seconds)."""

    inputs: tuple[SystemStreamPartition, ...] = ()
    # streams whose partition count is discovered (Kafka): their partitions come from the
    # latest job model until the partition monitor reports
    monitored_streams: tuple[tuple[str, str], ...] = ()
    shard_streams: tuple[tuple[str, str], ...] = ()  # Kinesis inputs: shards listed
    grouper: str = "GroupByPartition"
    elasticity_factor: int = 1
    max_elasticity_factor: int = DEFAULT_MAX_ELASTICITY_FACTOR
    stateful: bool = False
    lease_ttl_s: float = 10.0
    heartbeat_interval_s: float = 2.0
    debounce_s: float = 1.0
    barrier_timeout_s: float = 30.0
    probing_interval_s: float = 600.0
    # a probing rebalance also runs as soon as heartbeats show a warm-up caught up, at most
    # once per this interval (KAFKA-10199: scale-out should not wait for the timer)
    probing_min_interval_s: float = 5.0
    # a processor whose long poll's connection closes and that shows no life (a poll here,
    # a heartbeat anywhere) within this leaves at once, not at its lease's expiry (0: off)
    poll_close_grace_s: float = 1.5
    assignment: AssignmentParams = field(default_factory=AssignmentParams)
    keep_job_models: int = 10
    # every heartbeat written to the store (other replicas read leases there); False for
    # the embedded store no other replica reads: renewals written half a TTL apart
    lease_write_through: bool = True
    reset_policy: ResetPolicy = ResetPolicy.EARLIEST


@dataclass(frozen=True, slots=True)
class RebalanceRecord:
    """Why and when a version was generated."""

    version: int
    reason: str
    at: float
    generation_seconds: float


class LifecycleObserver(Protocol):
    """What the lifecycle reports (metrics); every method must be cheap and never raise."""

    def job_model_generated(self, reason: str, seconds: float, tasks: int) -> None:
        """A version was generated for ``reason`` in ``seconds`` with ``tasks`` tasks."""
        ...

    def barrier_ended(self, state: str, seconds: float) -> None:
        """A barrier completed or timed out after ``seconds``."""
        ...

    def processors_changed(self, count: int) -> None:
        """The number of registered processors changed."""
        ...


class _NoObserver:
    def job_model_generated(self, reason: str, seconds: float, tasks: int) -> None:
        pass

    def barrier_ended(self, state: str, seconds: float) -> None:
        pass

    def processors_changed(self, count: int) -> None:
        pass


class Coordinator:
    """The leader's job-model lifecycle (and what every replica serves)."""

    def __init__(
        self,
        config: CoordinatorConfig,
        store: MetadataStore,
        leader: LeaderRole,
        clock: Clock,
        observer: LifecycleObserver | None = None,
        prepare: Callable[[JobModel], object] | None = None,
    ) -> None:
        """``prepare`` runs on each new job model in a worker thread before it is published
        (the service renders its JSON there), so waiters woken by the publication are
        answered at once instead of queueing behind megabytes of rendering."""
        self.config = config
        self._prepare = prepare
        self._store = store
        self._leader = leader
        self._clock = clock
        self._observer = observer or _NoObserver()
        self.membership = Membership(store, clock, config.lease_ttl_s,
                                     write_through=config.lease_write_through)
        self._models = JobModelRepository(store, config.keep_job_models)
        self._barriers = BarrierRepository(store)
        self._acks = AckGroup(self._write_acks)  # acks written together (group commit)
        self._locality = TaskLocality(store)
        self._desired = DesiredConfig(store)
        self._scheduler: Scheduler | None = None
        self._lock = asyncio.Lock()  # guards state changes; held only briefly
        self._generation = asyncio.Lock()  # one job model generation at a time
        self._changed = asyncio.Event()
        self._signalled: tuple[object, object] = (None, None)  # what the waiters last saw
        self._sweep_due = float("inf")  # when the next lease sweep should run (monotonic)
        self._latest: JobModel | None = None
        self._pointer: int | None = None
        self._barrier: Barrier | None = None
        self._active: JobModel | None = None
        self._model_cache = ModelCache()
        self._generator = JobModelGenerator()  # keeps the last models' indexes
        self._known_locality: dict[str, str] = {}
        self._pending_reasons: set[str] = set()
        # The processors this replica last reacted to. A heartbeat, poll or commit that
        # reaches this replica reads the lease of a processor another replica registered
        # into the cache; comparing the cache with this set (not with the cache before a
        # sweep) is what still turns that processor into a join.
        self._members_seen: frozenset[str] = frozenset()
        self._probing_wanted = False
        self.rebalances: deque[RebalanceRecord] = deque(maxlen=20)  # newest last
        self._inputs = tuple(sorted({s.whole() for s in config.inputs}))
        self._polls: dict[str, float] = {}  # processor -> its last job model request
        # shard lineage of Kinesis inputs (grouping.shards), into every job model's config
        self._lineage: dict[tuple[str, str], dict[int, Shard]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._lead_since = clock.now()
        self._store_lost_at: float | None = None  # when a sweep first found the store down
        self._barrier_outcomes: dict[int, bool] = {}  # version -> its barrier was done
        self._warmups: frozenset[tuple[str, str]] = frozenset()  # (task, processor)
        self._last_probe = float("-inf")
        self._desired_cache: dict[str, Any] = {}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Load persisted state and resume: leases, latest and active models, barrier.
        Then watch the store for what other replicas write (pointers, desired config)."""
        self._scheduler = Scheduler()
        self._loop = asyncio.get_running_loop()
        await self._io(self._load)
        self._membership_news()
        self._observer.processors_changed(len(self.membership.live()))
        self._schedule_sweep()
        def watch() -> None:
            for namespace, key in ((VERSIONS, "latest"), (VERSIONS, "active"),
                                   (CONFIG, "desired")):
                self._store.watch(namespace, key, self._on_store_change)

        await self._io(watch)
        if self._leader.is_leader():
            self._take_lead()

    async def stop(self) -> None:
        """Cancel timers and wake long polls."""
        self._stopping = True
        if self._scheduler is not None:
            await self._scheduler.close()
        self._notify()

    def leadership_changed(self, leading: bool) -> None:
        """Called (from any thread) when this replica gains or loses leadership."""
        loop = self._loop
        if loop is None or self._stopping:
            return
        loop.call_soon_threadsafe(self._take_lead if leading else self._give_up_lead)

    def _take_lead(self) -> None:
        # A new leader starts from what the store says, and gives every lease a full TTL
        # from now: heartbeats that reached no replica during the handover (or while the
        # store was unreachable) must not expire processors that are alive.
        self._lead_since = self._clock.now()
        log.info("acting as leader (epoch %d)", self._leader.epoch,
                 extra={"reason": "leader_elected"})
        self._schedule("refresh", 0.0, self._lead_start)

    async def _lead_start(self) -> None:
        await self._refresh()
        await self._recover_barrier()
        barrier = self._barrier
        if barrier is not None and barrier.state is BarrierState.PENDING:
            left = barrier.started_at + self.config.barrier_timeout_s - self._clock.now()
            self._schedule("barrier-timeout", max(0.0, left),
                           lambda: self._barrier_timeout(barrier.version))
        if self._needs_regeneration(self._latest):
            self._trigger("start" if self._latest is None else "leader_elected",
                          debounce=False)

    async def _recover_barrier(self) -> None:
        """A version published without its barrier record (by a version of Coxswain that
        wrote it after the pointer, and crashed in between) would never complete nor time
        out: give it a pending barrier from now, so that acks and the timeout work."""
        async with self._lock:
            latest = self._latest
            if latest is None or self._barrier is not None:
                return
            stored = await self._io(lambda: self._barriers.load(latest.version))
            if stored is None:
                now = self._clock.now()
                stored = Barrier(latest.version, BarrierState.PENDING,
                                 frozenset(latest.containers), frozenset(), now)
                if not stored.participants:
                    stored = Barrier(latest.version, BarrierState.DONE, frozenset(),
                                     frozenset(), now, now)
                log.warning("version %d had no barrier record: recovered as %s",
                            latest.version, stored.state.value,
                            extra={"version": latest.version})
                await self._io(lambda: self._barriers.save(stored))
                await self._io(lambda: self._store.watch(
                    BARRIERS, f"{latest.version:020d}", self._barrier_watch(latest.version)))
            self._barrier = stored
            if stored.state is BarrierState.DONE and (
                    self._active is None or self._active.version < latest.version):
                await self._barrier_done(stored)

    def _give_up_lead(self) -> None:
        log.warning("no longer the leader: timers stopped", extra={"reason": "leader_lost"})
        if self._scheduler is not None:
            for name in ("rebalance", "barrier-timeout", "probing"):
                self._scheduler.cancel(name)

    def _on_store_change(self) -> bool | None:
        # The store's thread: hand over to the event loop, coalescing bursts.
        loop = self._loop
        if loop is None or self._stopping:
            return False
        loop.call_soon_threadsafe(self._schedule, "refresh", 0.0, self._refresh)
        return None

    async def _refresh(self) -> None:
        """Catch up with what other replicas wrote: a newer version (the leader's), its
        barrier (acks reach any replica), the active version, the desired factor."""
        latest = await self._io(self._models.latest)
        self._desired_cache = await self._io(self._desired.read)
        async with self._lock:
            current = self._latest
            if latest is not None and (current is None or latest[0] > current.version):
                version, pointer = latest
                model = await self._io(lambda: self._load_prepared(version))
                if model is not None:
                    self._latest, self._pointer = model, pointer
                    self._adopt_inputs(model)
                    self._model_cache.put(model)
                    await self._io(lambda: self._store.watch(
                        BARRIERS, f"{version:020d}", self._barrier_watch(version)))
            model = self._latest
            if model is not None:
                barrier = await self._io(lambda: self._barriers.load(model.version))
                if barrier is not None and barrier != self._barrier:
                    self._barrier = barrier
                active = await self._io(self._models.active_version)
                if active is not None and (self._active is None
                                           or active > self._active.version):
                    found = await self.model(active)
                    if found is not None:
                        self._active = found
                if (self._leader.is_leader() and self._barrier is not None
                        and self._barrier.version == model.version
                        and self._barrier.state is BarrierState.DONE
                        and (self._active is None or self._active.version < model.version)):
                    await self._barrier_done(self._barrier)
                elif (self._barrier is not None and self._barrier.state is BarrierState.DONE
                      and self._barrier.version == model.version):
                    self._active = model
            self._notify()
        if self._leader.is_leader() and self._latest is not None \
                and self._latest.elasticity_factor != self.elasticity_factor():
            self._trigger("scale", debounce=False)

    def _barrier_watch(self, version: int) -> Callable[[], bool | None]:
        def on_change() -> bool | None:
            latest = self._latest
            if self._stopping or (latest is not None and latest.version > version):
                return False  # superseded: stop watching this barrier
            return self._on_store_change()
        return on_change

    def _adopt_inputs(self, model: JobModel | None) -> None:
        """Partitions of monitored streams as the latest job model has them (the leader
        that generated it may have seen partitions added that this replica has not); the
        shards of Kinesis streams and their lineage exactly as it has them."""
        if model is not None and SHARDS in model.config:
            # the streams this coordinator reads (a restart may have changed --input)
            self._lineage = {k: v for k, v in lineage_of_config(model.config).items()
                             if k in self.config.shard_streams}
            listed = {SystemStreamPartition(system, stream, p)
                      for (system, stream), shards in self._lineage.items() for p in shards}
            self._inputs = tuple(sorted(
                {s for s in self._inputs if (s.system, s.stream) not in self._lineage}
                | listed))
        if model is None or not self.config.monitored_streams:
            return
        monitored = set(self.config.monitored_streams)
        seen = {s.whole() for c in model.containers.values() for t in c.active_tasks
                for s in t.ssps if (s.system, s.stream) in monitored}
        if not seen:
            return
        kept = {s for s in self._inputs if (s.system, s.stream) not in monitored}
        mine = {s for s in self._inputs if (s.system, s.stream) in monitored}
        if len(seen) > len(mine):
            self._inputs = tuple(sorted(kept | seen))

    def _load_prepared(self, version: int) -> JobModel | None:
        model = self._models.load(version)
        if model is not None and self._prepare is not None:
            self._prepare(model)
        return model

    def _load(self) -> None:
        self.membership.load()
        self._desired_cache = self._desired.read()
        self._known_locality = self._locality.read()
        latest = self._models.latest()
        if latest is None:
            return
        version, self._pointer = latest
        self._latest = self._models.load(version)
        self._adopt_inputs(self._latest)
        self._barrier = self._barriers.load(version)
        active = self._models.active_version()
        if active is not None:
            self._active = self._latest if active == version else self._models.load(active)

    # ------------------------------------------------------------------ reads

    @property
    def latest(self) -> JobModel | None:
        """The newest published job model."""
        return self._latest

    @property
    def barrier(self) -> Barrier | None:
        """The barrier of the newest published version."""
        return self._barrier

    @property
    def active(self) -> JobModel | None:
        """The newest job model whose barrier completed: the one being processed."""
        return self._active

    @property
    def leader(self) -> LeaderRole:
        """This replica's leader role."""
        return self._leader

    @property
    def last_rebalance(self) -> RebalanceRecord | None:
        """The newest job model's generation: why and when."""
        return self.rebalances[-1] if self.rebalances else None

    @property
    def warmups(self) -> frozenset[tuple[str, str]]:
        """(task, processor) pairs holding a warm-up copy in the latest job model."""
        return frozenset(self._warmups)

    @property
    def inputs(self) -> tuple[SystemStreamPartition, ...]:
        """The whole input partitions the job reads."""
        return self._inputs

    def elasticity_factor(self) -> int:
        """The factor the next version will be generated with (the operator's last
        ``/scale``, as this replica last read it from the store)."""
        return int(self._desired_cache.get("elasticityFactor", self.config.elasticity_factor))

    def probing_wanted(self) -> bool:
        """True while the assignment asks for probing rebalances."""
        return self._probing_wanted

    async def wait_for_change(
        self, since: int | None, barrier: BarrierState | None, timeout_s: float
    ) -> bool:
        """Wait until a version newer than ``since`` exists (or, when ``barrier`` is given,
        until version ``since``'s barrier left that state). False on timeout."""
        deadline = self._clock.monotonic() + max(0.0, timeout_s)
        while True:
            if self._changed_since(since, barrier):
                return True
            left = deadline - self._clock.monotonic()
            if left <= 0:
                return False
            event = self._changed
            try:
                await asyncio.wait_for(event.wait(), left)
            except TimeoutError:
                return self._changed_since(since, barrier)

    def _changed_since(self, since: int | None, barrier: BarrierState | None) -> bool:
        latest = self._latest
        if latest is None:
            return False
        if since is None or latest.version > since:
            return True
        current = self._barrier
        return (barrier is not None and latest.version == since and current is not None
                and current.state is not barrier)

    def _notify(self) -> None:
        """Wake the long polls if what they wait for changed: the latest version or its
        barrier's state. Each ack changes the barrier's acked set, which no waiter looks
        at: waking 1000 parked polls on each of 1000 acks cost a leader tens of seconds of
        CPU per rebalance."""
        latest, barrier = self._latest, self._barrier
        signal = (None if latest is None else latest.version,
                  None if barrier is None else (barrier.version, barrier.state))
        if signal == self._signalled:
            return
        self._signalled = signal
        # Wake every waiter of the current event, and give later waiters a fresh one.
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    # ------------------------------------------------------------------ membership

    async def register(
        self, processor_id: str | None, location_id: str, host: str | None
    ) -> tuple[ProcessorLease, bool, str]:
        """Register a processor; a new one triggers a (debounced) rebalance. Returns the
        lease, whether it is new, and the lease token of this incarnation."""
        async with self._lock:
            lease, created, token = await self._io(
                lambda: self.membership.register(processor_id, location_id, host))
        if created:
            self._membership_news()
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
            known = self._task_names(self._latest)
            task_lags = {t: lag for t, lag in task_lags.items() if t in known}
        async with self._lock:
            renewed = self.membership.renew_cached(processor_id, token, task_lags, stats)
            if renewed is not None:  # renewed in memory: no store write, no thread hop
                return renewed
            return await self._io(
                lambda: self.membership.heartbeat(processor_id, token, task_lags, stats))

    def latest_task_names(self) -> frozenset[str]:
        """The active task names of the latest job model."""
        return self._task_names(self._latest)

    @staticmethod
    def _task_names(model: JobModel | None) -> frozenset[str]:
        if model is None:
            return frozenset()
        return model.memo("task-names", lambda m: frozenset(
            t.name for c in m.containers.values() for t in c.active_tasks))

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
        grace = self.config.poll_close_grace_s
        if grace <= 0 or not self._leader.is_leader() \
                or processor_id not in self.membership.live():
            return
        closed_at = self._clock.now()
        self._schedule(f"poll-closed:{processor_id}", grace,
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
            lease = await self._io(lambda: self.membership.reload(processor_id))
            if lease is None:
                return  # gone already (left, expired)
            renewed_at = lease.expires_at - self.membership.lease_ttl_s
            if renewed_at > closed_at or self._polls.get(processor_id, 0.0) > closed_at:
                return  # it heartbeat (through any replica) or polled again: alive
            await self._io(lambda: self.membership.remove([processor_id]))
            self._membership_news()
        self._polls.pop(processor_id, None)
        self._observer.processors_changed(len(self.membership.live()))
        log.info("processor %s: long poll closed and no sign of life for %.1fs: left",
                 processor_id, self._clock.now() - closed_at,
                 extra={"reason": "poll_closed"})
        self._trigger("poll_closed")

    async def leave(self, processor_id: str) -> bool:
        """A processor leaves now; a rebalance follows."""
        async with self._lock:
            left = await self._io(lambda: self.membership.leave(processor_id))
        if left:
            self._membership_news()
            self._observer.processors_changed(len(self.membership.live()))
            self._trigger("leave")
        return left

    async def _sweep(self) -> None:
        """Every replica refreshes its view of the leases (heartbeats reach any replica);
        the leader also expires leases and reacts to processors that joined or left
        through other replicas."""
        try:
            async with self._lock:
                await self._io(self.membership.load)
                if self._store_lost_at is not None:
                    # Heartbeats could not be written while the store was unreachable: as
                    # after a handover, every lease gets a full TTL from now before any
                    # expires, so an outage costs no live worker its tasks.
                    log.warning("store reachable again after %.1fs: every lease renewed "
                                "for a full TTL", self._clock.now() - self._store_lost_at,
                                extra={"reason": "store_recovered"})
                    self._store_lost_at = None
                    self._lead_since = self._clock.now()
                expired: list[str] = []
                # A sweep that runs a heartbeat interval late found this process stalled
                # (a long pause, a starved event loop): the heartbeats of that time are
                # still unread in their sockets, so no lease expires before they are read
                # (the next sweep, on time, expires the ones that really ran out).
                late = self._clock.monotonic() - self._sweep_due
                stalled = late > self.config.heartbeat_interval_s
                if stalled and self._leader.is_leader():
                    log.warning("lease sweep %.1fs late (this coordinator was stalled): "
                                "expiring no lease before the heartbeats of that time are "
                                "read", late, extra={"reason": "sweep_late"})
                # a new leader grants a full TTL first: see _take_lead
                if self._leader.is_leader() and not stalled and \
                        self._clock.now() >= self._lead_since + self.config.lease_ttl_s:
                    expired = self.membership.expired()
                    if expired:
                        await self._io(lambda: self.membership.remove(expired))
                joined, left = self._membership_news()
            self._probe_if_warm()
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
            self._schedule_sweep()

    def _membership_news(self) -> tuple[frozenset[str], frozenset[str]]:
        """Processors that joined and left since this replica last reacted to its
        membership, whatever brought them into or out of its cache."""
        live = frozenset(self.membership.live())
        joined, left = live - self._members_seen, self._members_seen - live
        self._members_seen = live
        for pid in left:  # its polls no longer matter (and ids must not pile up)
            self._polls.pop(pid, None)
        return joined, left

    def _schedule_sweep(self) -> None:
        # Refresh at most once a second (a sweep reads every lease), but on the leader
        # wake right when the next known lease runs out: worker failover should cost the
        # lease TTL, not the TTL plus a sweep period.
        interval = min(1.0, self.config.lease_ttl_s / 4)
        expiry = self.membership.next_expiry()
        if expiry is not None and self._leader.is_leader():
            interval = min(interval, max(0.02, expiry - self._clock.now() + 0.01))
        self._sweep_due = self._clock.monotonic() + interval
        self._schedule("lease-sweep", interval, self._sweep)

    # ------------------------------------------------------------------ triggers

    def _trigger(self, reason: str, debounce: bool = True) -> None:
        if not self._leader.is_leader():
            return  # the leader notices through the store (sweep, watches)
        self._pending_reasons.add(reason)
        delay = self.config.debounce_s if debounce else 0.0
        self._schedule("rebalance", delay, self._rebalance_pending)

    async def _rebalance_pending(self) -> None:
        reasons, self._pending_reasons = self._pending_reasons, set()
        if reasons:
            await self.rebalance("+".join(sorted(reasons)))

    async def scale(self, elasticity_factor: int, wait_s: float = 10.0) -> int:
        """Set the elasticity factor; the leader generates a version at once. Returns the
        latest version (unchanged when the factor already was ``elasticity_factor``). On a
        follower the desired factor is written to the store, where the leader sees it;
        the answer waits (up to ``wait_s``) for the leader's new version."""
        validate_elasticity_factor(elasticity_factor, self.config.max_elasticity_factor)
        async with self._lock:
            self._desired_cache = await self._io(
                lambda: self._desired.update(elasticityFactor=elasticity_factor))
        if self._leader.is_leader():
            await self.rebalance("scale")
        else:
            before = self._latest.version if self._latest is not None else None
            latest = self._latest
            if latest is None or latest.elasticity_factor != elasticity_factor:
                await self.wait_for_change(before, None, wait_s)
        return self._latest.version if self._latest is not None else 0

    async def update_inputs(self, inputs: Iterable[SystemStreamPartition]) -> None:
        """A changed input partition set (e.g. partitions added) generates a new version."""
        whole = tuple(sorted({s.whole() for s in inputs}))
        if whole != self._inputs:
            self._inputs = whole
            await self.rebalance("inputs_changed")

    async def update_shards(self, system: str, stream: str, shards: Mapping[int, Shard]
                            ) -> list[SystemStreamPartition]:
        """A Kinesis stream's shard listing: its partitions become exactly the listed
        shards (children added, expired parents gone) and the lineage goes into the job
        model's config; any change generates a new version. Returns the partitions that
        left (their checkpoints are for the caller to forget)."""
        key = (system, stream)
        listed = {SystemStreamPartition(system, stream, p) for p in shards}
        mine = {s for s in self._inputs if (s.system, s.stream) == key}
        inputs = tuple(sorted({s for s in self._inputs if (s.system, s.stream) != key}
                              | listed))
        lineage = {**self._lineage, key: dict(shards)}
        if inputs != self._inputs or lineage != self._lineage:
            self._inputs, self._lineage = inputs, lineage
            await self.rebalance("inputs_changed")
        return sorted(mine - listed)

    def _needs_regeneration(self, model: JobModel | None) -> bool:
        """True when the configured job differs from ``model`` (e.g. after a restart with
        other inputs or factor, or with processors that joined or left meanwhile)."""
        live = set(self.membership.live())
        if model is None:
            return bool(live)
        grouped = {s.whole() for c in model.containers.values()
                   for t in c.active_tasks for s in t.ssps}
        return bool(live) and (
            model.elasticity_factor != self.elasticity_factor()
            or model.ssp_grouper != self.config.grouper
            or set(model.containers) != live
            or (bool(model.containers) and grouped != set(self._inputs))
        )

    # ------------------------------------------------------------------ generation

    async def rebalance(self, reason: str) -> JobModel | None:
        """Generate and publish a new version now (leader only); None if nothing changed.

        Generation runs without the state lock (heartbeats and registrations go on while a
        large model is computed); one generation at a time, then publication under the lock.
        """
        if not self._leader.is_leader():
            log.info("not the leader: rebalance (%s) left to the leader", reason)
            return None
        async with self._generation:
            return await self._generate_and_publish(reason)

    async def _generate_and_publish(self, reason: str) -> JobModel | None:
        async with self._lock:
            processors = self.membership.locations()
            previous = self._latest
            factor = self.elasticity_factor()
            lags = self.membership.task_lags()
            locality = self._known_locality
            inputs = self._inputs
            extra = {SHARDS: lineage_to_config(self._lineage)} if self._lineage else None
        version = (previous.version if previous is not None else 0) + 1
        started = time.perf_counter()
        def generate() -> GeneratedJobModel:
            generated = self._generator.generate(
                version, inputs, grouper_by_name(self.config.grouper), factor, processors,
                previous=previous, task_locality=locality, task_lags=lags,
                stateful=self.config.stateful, params=self.config.assignment,
                max_elasticity_factor=self.config.max_elasticity_factor,
                extra_config=extra,
            )
            if self._prepare is not None:
                self._prepare(generated.job_model)
            return generated

        generated = await asyncio.to_thread(generate)
        async with self._lock:
            return await self._publish(reason, previous, generated,
                                       time.perf_counter() - started)

    async def _publish(
        self, reason: str, previous: JobModel | None, generated: GeneratedJobModel,
        seconds: float,
    ) -> JobModel | None:
        version = generated.job_model.version
        model = generated.job_model
        self._probing_wanted = generated.assignment.probing_rebalance_needed
        self._warmups = generated.assignment.warmups
        if self._probing_wanted:
            self._schedule("probing", self.config.probing_interval_s, self._probe)
        elif self._scheduler is not None:
            self._scheduler.cancel("probing")
        if previous is not None and previous.containers == model.containers \
                and previous.config == model.config:
            log.info("rebalance (%s): assignment unchanged, version %d stays", reason,
                     previous.version, extra={"reason": reason, "version": previous.version})
            return None
        if not self._leader.is_leader():
            log.warning("lost leadership while generating version %d (%s): not published",
                        version, reason, extra={"reason": reason, "version": version})
            return None
        fence = self._leader.fence()
        now = self._clock.now()
        barrier = Barrier(version, BarrierState.PENDING, frozenset(model.containers),
                          frozenset(), now)
        if not barrier.participants:
            barrier = Barrier(version, BarrierState.DONE, frozenset(), frozenset(), now, now)
        # the barrier exists before the pointer makes the version visible: an ack can never
        # find a published version without one
        published = await self._io(lambda: self._models.publish(
            model, self._pointer, fence, before_pointer=lambda: self._barriers.save(barrier)))
        if not published:
            log.error("version %d (%s) refused by the store: another leader published first "
                      "or this replica's epoch %d is stale; reloading", version, reason,
                      self._leader.epoch, extra={"reason": reason, "version": version})
            await self._io(self._load)
            self._notify()
            raise Fenced(f"job model version {version} was fenced by a newer publication")
        self._pointer = (self._pointer or 0) + 1
        self._latest, self._barrier = model, barrier
        self._model_cache.put(model)
        await self._io(lambda: self._store.watch(BARRIERS, f"{version:020d}",
                                                 self._barrier_watch(version)))
        self.rebalances.append(RebalanceRecord(version, reason, now, seconds))
        tasks = sum(len(c.active_tasks) for c in model.containers.values())
        self._observer.job_model_generated(reason, seconds, tasks)
        log.info("published job model version %d (%s): %d tasks on %d processors in %.3fs",
                 version, reason, tasks, len(model.containers), seconds,
                 extra={"reason": reason, "version": version})
        if barrier.state is BarrierState.DONE:
            await self._barrier_done(barrier)
        else:
            self._schedule("barrier-timeout", self.config.barrier_timeout_s,
                           lambda: self._barrier_timeout(version))
        self._notify()
        return model

    async def _probe(self) -> None:
        self._last_probe = self._clock.now()
        await self.rebalance("probing")

    def _probe_if_warm(self) -> None:
        """Leader, at each lease sweep: a warm-up whose state caught up (its processor
        reports a lag within the acceptable recovery lag) gets its probing rebalance now,
        rate-limited, instead of at the probing timer."""
        if not (self._probing_wanted and self._warmups and self._leader.is_leader()):
            return
        if self.config.probing_min_interval_s >= self.config.probing_interval_s:
            return  # configured as timer only: the timer always comes first
        if self._clock.now() - self._last_probe < self.config.probing_min_interval_s:
            return
        lags = self.membership.task_lags()
        acceptable = self.config.assignment.acceptable_recovery_lag
        warm = sorted((task, pid) for task, pid in self._warmups
                      if lags.get(pid, {}).get(task, acceptable + 1) <= acceptable)
        if warm:
            log.info("warm-ups caught up (%s): probing rebalance now",
                     ", ".join(f"{t} on {p}" for t, p in warm[:5]),
                     extra={"reason": "probing"})
            self._last_probe = self._clock.now()
            self._schedule("probing", 0.0, self._probe)

    # ------------------------------------------------------------------ barrier

    async def ack(self, version: int, processor_id: str) -> BarrierState:
        """A processor acknowledges ``version`` (it stopped and committed what it loses).
        Any replica takes acks: the barrier is updated in the store by compare-and-set,
        with the acks that arrived meanwhile (:class:`AckGroup`)."""
        updated = await self._acks.ack(version, processor_id)
        async with self._lock:
            latest = self._latest
            if latest is None or latest.version != version:
                return updated.state  # superseded (or not seen here yet)
            current = self._barrier
            if current is not None and current.version == version and (
                    current.state is not BarrierState.PENDING
                    or len(current.acked) > len(updated.acked)):
                return current.state  # a later write of this barrier was seen already
            changed = updated != current
            self._barrier = updated
            if updated.state is BarrierState.DONE and (
                    self._active is None or self._active.version < version):
                if self._leader.is_leader():
                    await self._barrier_done(updated)
                else:
                    self._active = latest  # the leader records it (it watches the barrier)
            if changed:
                self._notify()
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

        updated = await self._io(lambda: self._barriers.update(version, acked))
        return updated, strangers

    async def _barrier_done(self, barrier: Barrier) -> None:
        model = self._latest
        assert model is not None and model.version == barrier.version
        if self._scheduler is not None:
            self._scheduler.cancel("barrier-timeout")
        locality = {name: c.location_id for c in model.containers.values()
                    for name in (t.name for t in c.active_tasks)}
        known = self._known_locality

        for old in [v for v in self._barrier_outcomes
                    if v < barrier.version - 2 * self.config.keep_job_models]:
            del self._barrier_outcomes[old]  # older than any model still kept

        def persist() -> None:
            self._models.set_active(barrier.version)
            self._locality.write(locality, known)
            self._barriers.prune(barrier.version - self.config.keep_job_models)

        await self._io(persist)
        self._known_locality = {**known, **locality}
        self._active = model
        waited = (barrier.ended_at or barrier.started_at) - barrier.started_at
        self._observer.barrier_ended(barrier.state.value, waited)
        log.info("barrier of version %d done", barrier.version,
                 extra={"version": barrier.version, "reason": "barrier_done"})

    async def _barrier_timeout(self, version: int) -> None:
        if not self._leader.is_leader():
            return
        async with self._lock:
            barrier = self._barrier
            if barrier is None or barrier.version != version:
                return
            now = self._clock.now()
            timed_out = await self._io(
                lambda: self._barriers.update(version, lambda b: b.time_out(now)))
            if timed_out is None or timed_out.state is not BarrierState.TIMED_OUT:
                return  # completed meanwhile through another replica
            self._barrier = timed_out
            silent = sorted(timed_out.silent)
            await self._io(lambda: self.membership.remove(silent))
            self._membership_news()
            self._observer.barrier_ended(timed_out.state.value, self.config.barrier_timeout_s)
            self._observer.processors_changed(len(self.membership.live()))
            log.warning("barrier of version %d timed out; dropping silent processors: %s",
                        version, ", ".join(silent),
                        extra={"version": version, "reason": "barrier_timeout"})
            self._notify()
        await self.rebalance("barrier_timeout")

    # ------------------------------------------------------------------ fencing

    async def model(self, version: int) -> JobModel | None:
        """The job model of ``version`` (cached), or None."""
        if self._latest is not None and self._latest.version == version:
            return self._latest
        cached = self._model_cache.get(version)
        if cached is not None:
            return cached
        found = await self._io(lambda: self._models.load(version))
        if found is not None:
            self._model_cache.put(found)
        return found

    async def check_commit(
        self, processor_id: str, version: int, task_names: Sequence[str]
    ) -> JobModel:
        """Refuse (Fenced) unless ``processor_id`` owns every task as active in the active
        job model and owned it in every version from ``version`` on (a commit tagged with
        an older version is stale when the task was elsewhere in between: another
        processor has worked on it since). Returns the model of ``version``."""
        if not self._leader.serves_commits():
            raise NotLeader("this coordinator does not hold the store's leadership lease "
                            "now; retry")
        active = self._active
        if active is None or version > active.version:
            # Another replica may have completed the barrier a moment ago (its watch
            # has not reached us yet): look at the store before refusing.
            await self._refresh()
            active = self._active
        if active is None:
            raise Fenced("no job model is active yet: nothing may be committed")
        if version > active.version:
            raise Fenced(f"version {version} is not active (active: {active.version})")
        _require_owner(active, processor_id, task_names,
                       f"processor {processor_id!r} does not own task {{task!r}} as active "
                       f"in the active job model (version {active.version})")
        if version == active.version:
            return active
        tagged = await self.model(version)
        if tagged is None:
            raise Fenced(f"version {version} is stale and no longer known")
        for v in range(active.version - 1, version - 1, -1):  # newest first: fails sooner
            # Only versions whose barrier completed can have had another processor work on
            # the task; a version superseded or timed out before that never ran anywhere
            # (a worker that never saw it rightly kept its query across it).
            if v != version and not await self._barrier_completed(v):
                continue
            model = tagged if v == version else await self.model(v)
            if model is None:
                raise Fenced(f"version {version} is stale: version {v} is no longer known")
            _require_owner(model, processor_id, task_names,
                           f"version {version} is stale: processor {processor_id!r} did not "
                           f"own task {{task!r}} in version {v}")
        return tagged

    async def _barrier_completed(self, version: int) -> bool:
        """Whether ``version``'s barrier was ever done (then processors may have run it);
        an unknown barrier counts as done. Final states are remembered."""
        known = self._barrier_outcomes.get(version)
        if known is not None:
            return known
        barrier = await self._io(lambda: self._barriers.load(version))
        if barrier is None:
            return True
        if barrier.state is not BarrierState.PENDING:
            self._barrier_outcomes[version] = barrier.state is BarrierState.DONE
        return barrier.state is BarrierState.DONE

    # ------------------------------------------------------------------ helpers

    def _require_leader(self) -> None:
        if not self._leader.is_leader():
            raise NotLeader("this replica is not the leader")

    def _schedule(self, name: str, delay_s: float, action: Callable[[], Awaitable[None]]) -> None:
        if self._scheduler is not None:
            self._scheduler.schedule(name, delay_s, action)

    async def _io(self, fn: Callable[[], T]) -> T:
        return await asyncio.to_thread(fn)


def _owners(model: JobModel) -> dict[str, str]:
    return model.memo("owners", lambda m: m.active_owner())


def _require_owner(model: JobModel, processor_id: str, task_names: Sequence[str],
                   refusal: str) -> None:
    """Fenced unless ``processor_id`` owns every task of ``task_names`` in ``model``;
    ``refusal`` names the task as ``{task!r}``."""
    owner = _owners(model)
    for name in task_names:
        if owner.get(name) != processor_id:
            raise Fenced(refusal.format(task=name))
