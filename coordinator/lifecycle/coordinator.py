"""The job-model lifecycle: rebalances, versions, barriers (with liveness, inputs, waiters
and commit fencing in their own modules of this package).

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
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

from coordinator.barrier import NAMESPACE as BARRIERS
from coordinator.barrier import Barrier, BarrierRepository, BarrierState
from coordinator.clock import Clock
from coordinator.errors import Fenced, NotLeader
from coordinator.fenced import FENCED, fenced_processors, without_fenced
from coordinator.job_models import VERSIONS, JobModelRepository
from coordinator.leadership.role import LeaderRole
from coordinator.lifecycle.barrier_keeper import BarrierKeeper
from coordinator.lifecycle.config import (
    CoordinatorConfig,
    LifecycleObserver,
    NoObserver,
    RebalanceRecord,
)
from coordinator.lifecycle.fencing import CommitFence
from coordinator.lifecycle.inputs import JobInputs
from coordinator.lifecycle.job_key_hash import choose_key_hash
from coordinator.lifecycle.liveness import Liveness
from coordinator.lifecycle.probing import Probing
from coordinator.lifecycle.versions import Versions, later
from coordinator.locality import (
    CONFIG,
    DesiredConfig,
    LocalityWriter,
    TaskLocality,
)
from coordinator.membership import Membership, ProcessorLease
from coordinator.scheduler import Scheduler
from coordinator.store.metadata import MetadataStore
from grouping.generation import GeneratedJobModel
from grouping.groupers import group_tasks, grouper_by_name
from grouping.incremental import JobModelGenerator
from grouping.key_bucket import validate_elasticity_factor
from grouping.key_hash import CONFIG_KEY as KEY_HASH
from grouping.key_hash import DEFAULT_KEY_HASH, KeyHash, key_hash_of, parse_key_hash
from grouping.model import JobModel, SystemStreamPartition
from grouping.shards import Shard

log = logging.getLogger("coxswain.coordinator")
# why a new leader regenerates at once: it found no version, or one for other processors
LEAD_START_REASONS = ("start", "leader_elected")
T = TypeVar("T")


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
        generation_scope: Callable[[], AbstractContextManager[object]] = nullcontext,
        hash_dependent_entries: Callable[[], int] = lambda: 0,
    ) -> None:
        """``prepare`` runs on each new job model in a worker thread before it is published
        (the service renders its JSON there), so waiters woken by the publication are
        answered at once instead of queueing behind megabytes of rendering.
        ``generation_scope()`` is entered around each generation and its ``prepare`` (the
        service keeps the garbage collector off the new model there).
        ``hash_dependent_entries()`` counts the checkpoint entries that depend on the job's
        key hash (read at start, when the configured hash differs from the job's)."""
        self.config = config
        self._prepare = prepare
        self._generation_scope = generation_scope
        self._store = store
        self._leader = leader
        self._clock = clock
        self._observer = observer or NoObserver()
        self._models = JobModelRepository(store, config.keep_job_models)
        self._versions = Versions(self._models, clock)
        self._barriers = BarrierRepository(store)
        self._locality = TaskLocality(store)
        self._locality_writes = LocalityWriter(self._locality)
        self._desired = DesiredConfig(store)
        self._scheduler: Scheduler | None = None
        self._lock = asyncio.Lock()  # guards state changes; held only briefly
        self._generation = asyncio.Lock()  # one job model generation at a time
        self._generator = JobModelGenerator()  # keeps the last models' indexes
        self._pending_reasons: set[str] = set()
        self.rebalances: deque[RebalanceRecord] = deque(maxlen=20)  # newest last
        self._inputs = JobInputs(config.inputs, config.monitored_streams,
                                 config.shard_streams)
        self._fence = CommitFence(self._barriers, self.model)
        self.membership = Membership(
            store, clock, config.lease_ttl_s,
            renews_in_memory=lambda: not config.lease_write_through and leader.is_leader())
        self._probing = Probing(config, self.membership, leader, clock, self._schedule,
                                self._cancel, self.rebalance)
        self.liveness = Liveness(config, self.membership, leader, clock, self._observer,
                                 self._lock, self._trigger,
                                 self.latest_task_names, self._probing.probe_if_warm)
        self._keeper = BarrierKeeper(
            config, self._versions, self._models, self._barriers, self._lock, leader, clock,
            self._observer, self.membership, self.liveness, self._locality_writes,
            self._fence, self._schedule, self._cancel, self.rebalance, self._index_for_next)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        # set once this replica, leading, has caught up with the store (and regenerated if
        # the processors had changed): a leader's first decisions come after that look
        self._lead_started = asyncio.Event()
        self._desired_cache: dict[str, Any] = {}
        self._hash_dependent_entries = hash_dependent_entries
        self._key_hash = config.key_hash or DEFAULT_KEY_HASH  # decided in _load
        # task names the inputs imply, by (inputs, factor, grouper): lags before a model
        self._implied: tuple[tuple[Any, ...], frozenset[str]] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Load persisted state and resume: leases, latest and active models, barrier.
        Then watch the store for what other replicas write (pointers, desired config)."""
        self._scheduler = Scheduler()
        self._loop = asyncio.get_running_loop()
        await self._io(self._load)
        self.liveness.start()

        def watch() -> None:
            for namespace, key in ((VERSIONS, "latest"), (VERSIONS, "active"),
                                   (CONFIG, "desired")):
                self._store.watch(namespace, key, self._on_store_change)

        await self._io(watch)
        if self._leader.is_leader():
            self._take_lead()

    async def stop(self) -> None:
        """Cancel timers, finish the task locality writes and wake long polls."""
        self._stopping = True
        if self._scheduler is not None:
            await self._scheduler.close()
        await self._locality_writes.flush()
        await self.liveness.stop()
        self._versions.notify()

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
        self.liveness.grant_full_ttl()
        log.info("acting as leader (epoch %d)", self._leader.epoch,
                 extra={"reason": "leader_elected"})
        self._lead_started.clear()
        self._schedule("refresh", 0.0, self._lead_start)

    async def _lead_start(self) -> None:
        await self._refresh()
        await self._recover_barrier()
        barrier = self._versions.barrier
        if barrier is not None and barrier.state is BarrierState.PENDING:
            left = barrier.started_at + self.config.barrier_timeout_s - self._clock.now()
            self._schedule("barrier-timeout", max(0.0, left),
                           lambda: self._keeper.timeout(barrier.version))
        if self._needs_regeneration(self._versions.latest):
            self._trigger("start" if self._versions.latest is None else "leader_elected",
                          debounce=False)
        else:
            self._lead_started.set()

    async def lead_started(self) -> None:
        """Until this replica, as the leader, has looked at the store and made the version
        that look asked for, if any."""
        await self._lead_started.wait()

    async def _recover_barrier(self) -> None:
        """A version published without its barrier record (by a version of Coxswain that
        wrote it after the pointer, and crashed in between) would never complete nor time
        out: give it a pending barrier from now, so that acks and the timeout work."""
        async with self._lock:
            latest = self._versions.latest
            if latest is None or self._versions.barrier is not None:
                return
            stored = await self._io(lambda: self._barriers.load(latest.version))
            if stored is None:
                stored = Barrier.opened(latest.version, frozenset(latest.containers),
                                        self._clock.now())
                log.warning("version %d had no barrier record: recovered as %s",
                            latest.version, stored.state.value,
                            extra={"version": latest.version})
                await self._io(lambda: self._barriers.save(stored))
                await self._io(lambda: self._store.watch(
                    BARRIERS, f"{latest.version:020d}", self._barrier_watch(latest.version)))
            self._versions.barrier = stored
            if stored.state is BarrierState.DONE and self._versions.active_before(
                    latest.version):
                await self._keeper.done(stored)

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
        # The barrier and the active version are read before the lock (store reads take
        # seconds while ZooKeeper is busy, and heartbeats' registrations and acks wait on
        # the lock); what the ack path applied meanwhile is never replaced by an older read.
        known = self._versions.latest
        read: tuple[int, Barrier | None, int | None] | None = None
        if known is not None and (latest is None or latest[0] <= known.version):
            version = known.version
            read = (version, await self._io(lambda: self._barriers.load(version)),
                    await self._io(self._models.active_version))
        async with self._lock:
            current = self._versions.latest
            if latest is not None and (current is None or latest[0] > current.version):
                version, pointer = latest
                model = await self._io(lambda: self._load_prepared(version))
                if model is not None:
                    self._versions.latest, self._versions.pointer = model, pointer
                    self._inputs.adopt(model)
                    self._versions.keep(model)
                    await self._io(lambda: self._store.watch(
                        BARRIERS, f"{version:020d}", self._barrier_watch(version)))
            model = self._versions.latest
            if model is not None:
                if read is not None and read[0] == model.version:
                    _, barrier, active = read
                else:
                    barrier = await self._io(lambda: self._barriers.load(model.version))
                    active = await self._io(self._models.active_version)
                if barrier is not None and later(barrier, self._versions.barrier):
                    self._versions.barrier = barrier
                if active is not None and (self._versions.active is None
                                           or active > self._versions.active.version):
                    found = await self.model(active)
                    if found is not None:
                        self._versions.active = found
                if (self._leader.is_leader() and self._versions.barrier is not None
                        and self._versions.barrier.version == model.version
                        and self._versions.barrier.state is BarrierState.DONE
                        and self._versions.active_before(model.version)):
                    await self._keeper.done(self._versions.barrier)
                elif (self._versions.barrier is not None
                      and self._versions.barrier.state is BarrierState.DONE
                      and self._versions.barrier.version == model.version):
                    self._versions.active = model
            self._versions.notify()
        if self._leader.is_leader() and self._versions.latest is not None \
                and (self._versions.latest.elasticity_factor != self.elasticity_factor()
                     or key_hash_of(self._versions.latest.config) != self.key_hash()):
            self._trigger("scale", debounce=False)

    def _barrier_watch(self, version: int) -> Callable[[], bool | None]:
        def on_change() -> bool | None:
            latest = self._versions.latest
            if self._stopping or (latest is not None and latest.version > version):
                return False  # superseded: stop watching this barrier
            return self._on_store_change()
        return on_change

    def _load_prepared(self, version: int) -> JobModel | None:
        model = self._models.load(version)
        if model is not None and self._prepare is not None:
            self._prepare(model)
        return model

    def _load(self) -> None:
        self.membership.load()
        self._desired_cache = self._desired.read()
        self._keeper.known_locality = self._locality.read()
        latest = self._models.latest()
        model = self._models.load(latest[0]) if latest is not None else None
        # before anything is served: a refused change stops the start, nothing written
        self._key_hash = choose_key_hash(self._desired_cache,
                                         model.config if model is not None else None,
                                         self.config.key_hash, self._hash_dependent_entries)
        if self._desired_cache.get(KEY_HASH) != self._key_hash.value:
            log.info("job key hash: %s", self._key_hash.value)
        if self._key_hash is KeyHash.CRC32:
            log.warning("this job's key buckets use crc32, the hash of librdkafka's default "
                        "partitioner: with an even partition count half or more of the "
                        "buckets of a confluent-kafka producer's topic stay empty (see "
                        "/status emptyBuckets); a new job uses xxhash64")
            self._desired_cache = self._desired.update(**{KEY_HASH: self._key_hash.value})
        if latest is None:
            return
        version, self._versions.pointer = latest
        self._versions.latest = model
        self._inputs.adopt(self._versions.latest)
        self._versions.barrier = self._barriers.load(version)
        active = self._models.active_version()
        if active is not None:
            self._versions.active = (self._versions.latest if active == version
                                     else self._models.load(active))

    # ------------------------------------------------------------------ reads

    @property
    def latest(self) -> JobModel | None:
        """The newest published job model."""
        return self._versions.latest

    @property
    def barrier(self) -> Barrier | None:
        """The barrier of the newest published version."""
        return self._versions.barrier

    @property
    def active(self) -> JobModel | None:
        """The newest job model whose barrier completed: the one being processed."""
        return self._versions.active

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
        return self._probing.warmups

    @property
    def inputs(self) -> tuple[SystemStreamPartition, ...]:
        """The whole input partitions the job reads."""
        return self._inputs.partitions

    def elasticity_factor(self) -> int:
        """The factor the next version will be generated with (the operator's last
        ``/scale``, as this replica last read it from the store)."""
        return int(self._desired_cache.get("elasticityFactor", self.config.elasticity_factor))

    def key_hash(self) -> KeyHash:
        """The job's key-bucket hash, which every version carries (``config.keyHash``):
        decided at start (``job_key_hash``), or another replica's since (the store's)."""
        found = self._desired_cache.get(KEY_HASH)
        return self._key_hash if found is None else parse_key_hash(found)

    def probing_wanted(self) -> bool:
        """True while the assignment asks for probing rebalances."""
        return self._probing.wanted

    async def wait_for_change(
        self, since: int | None, barrier: BarrierState | None, timeout_s: float
    ) -> bool:
        """Wait until a version newer than ``since`` exists (or, when ``barrier`` is given,
        until version ``since``'s barrier left that state). False on timeout."""
        return await self._versions.wait_for_change(since, barrier, timeout_s)

    async def ack(self, version: int, processor_id: str) -> BarrierState:
        """A processor acknowledges ``version`` (see :meth:`BarrierKeeper.ack`)."""
        return await self._keeper.ack(version, processor_id)

    # ------------------------------------------------------------------ membership

    async def register(
        self, processor_id: str | None, location_id: str, host: str | None
    ) -> tuple[ProcessorLease, bool, str]:
        """Register a processor (see :meth:`Liveness.register`)."""
        return await self.liveness.register(processor_id, location_id, host)

    async def heartbeat(
        self, processor_id: str, token: str | None, task_lags: Mapping[str, int] | None,
        stats: Mapping[str, Any] | None,
    ) -> ProcessorLease:
        """Renew a processor's lease and record its lags (see :meth:`Liveness.heartbeat`)."""
        return await self.liveness.heartbeat(processor_id, token, task_lags, stats)

    async def leave(self, processor_id: str) -> bool:
        """A processor leaves now; a rebalance follows."""
        return await self.liveness.leave(processor_id)

    def poll_seen(self, processor_id: str) -> None:
        """A job model request of ``processor_id`` arrived (a sign of life)."""
        self.liveness.poll_seen(processor_id)

    def poll_closed(self, processor_id: str) -> None:
        """The connection of a long poll of ``processor_id`` closed before its answer
        (see :meth:`Liveness.poll_closed`)."""
        self.liveness.poll_closed(processor_id)

    def latest_task_names(self) -> frozenset[str]:
        """The active task names of the latest job model; before the first, the names
        the job's inputs, grouper and factor imply (what the first generation makes), so
        that lags reported before it count in it (KIP-441's first assignment)."""
        model = self._versions.latest
        if model is None:
            return self._implied_task_names()
        return model.memo("task-names", lambda m: frozenset(
            t.name for c in m.containers.values() for t in c.active_tasks))

    def _implied_task_names(self) -> frozenset[str]:
        key = (self._inputs.partitions, self.elasticity_factor(), self.config.grouper)
        if self._implied is None or self._implied[0] != key:
            tasks = group_tasks(grouper_by_name(key[2]), key[0], key[1],
                                max_elasticity_factor=self.config.max_elasticity_factor)
            self._implied = (key, frozenset(t.name for t in tasks))
        return self._implied[1]

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
        if reasons & set(LEAD_START_REASONS):
            self._lead_started.set()

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
            before = self._versions.latest.version if self._versions.latest is not None else None
            latest = self._versions.latest
            if latest is None or latest.elasticity_factor != elasticity_factor:
                await self.wait_for_change(before, None, wait_s)
        return self._versions.latest.version if self._versions.latest is not None else 0

    async def update_inputs(self, inputs: Iterable[SystemStreamPartition]) -> None:
        """A changed input partition set (e.g. partitions added) generates a new version."""
        if self._inputs.replace(inputs):
            await self.rebalance("inputs_changed")

    async def update_shards(self, system: str, stream: str, shards: Mapping[int, Shard]
                            ) -> list[SystemStreamPartition]:
        """A Kinesis stream's shard listing: its partitions become exactly the listed
        shards (children added, expired parents gone) and the lineage goes into the job
        model's config; any change generates a new version. Returns the partitions that
        left (their checkpoints are for the caller to forget)."""
        changed, left = self._inputs.list_shards(system, stream, shards)
        if changed:
            await self.rebalance("inputs_changed")
        return left

    def _needs_regeneration(self, model: JobModel | None) -> bool:
        """True when the configured job differs from ``model`` (e.g. after a restart with
        other inputs or factor, or with processors that joined or left meanwhile)."""
        live = set(self.membership.live())
        if model is None:
            return bool(live)
        return bool(live) and (
            model.elasticity_factor != self.elasticity_factor()
            or key_hash_of(model.config) != self.key_hash()
            or model.ssp_grouper != self.config.grouper
            or set(model.containers) != live
            or self._inputs.grouped_differently(model)
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
            previous = self._versions.latest
            factor = self.elasticity_factor()
            lags = self.membership.task_lags()
            locality = self._keeper.known_locality
            inputs = self._inputs.partitions
            extra = self._inputs.job_config()
            fenced = fenced_processors(self.active, previous, processors)
        extra = {**(extra or {}), KEY_HASH: self.key_hash().value}
        if fenced:  # exactly-once output: who the participants fence before acking
            extra = {**extra, FENCED: fenced}
        version = (previous.version if previous is not None else 0) + 1
        def generate() -> tuple[GeneratedJobModel, float]:
            """The new model and the seconds its computation took (its preparation
            after it is not part of them)."""
            with self._generation_scope():
                started = time.perf_counter()
                generated = self._generator.generate(
                    version, inputs, grouper_by_name(self.config.grouper), factor,
                    processors, previous=previous, task_locality=locality, task_lags=lags,
                    stateful=self.config.stateful, params=self.config.assignment,
                    max_elasticity_factor=self.config.max_elasticity_factor,
                    extra_config=extra,
                )
                took = time.perf_counter() - started
                if self._prepare is not None:
                    self._prepare(generated.job_model)
            return generated, took

        began = time.perf_counter()
        generated, took = await asyncio.to_thread(generate)
        async with self._lock:
            return await self._publish(reason, previous, generated, took,
                                       time.perf_counter() - began - took)

    async def _index_for_next(self, model: JobModel) -> None:
        async with self._generation:  # after any generation under way, never beside one
            if model is not self._versions.latest:
                return  # superseded: the next generation starts from a newer model

            def index() -> None:
                with self._generation_scope():
                    self._generator.index_lineage(model)

            await asyncio.to_thread(index)

    async def _publish(
        self, reason: str, previous: JobModel | None, generated: GeneratedJobModel,
        seconds: float, prepare_seconds: float,
    ) -> JobModel | None:
        version = generated.job_model.version
        model = generated.job_model
        self._probing.assigned(generated.assignment.probing_rebalance_needed,
                               generated.assignment.warmups)
        if previous is not None and previous.containers == model.containers \
                and without_fenced(previous.config) == without_fenced(model.config):
            log.info("rebalance (%s): assignment unchanged, version %d stays", reason,
                     previous.version, extra={"reason": reason, "version": previous.version})
            return None
        if not self._leader.is_leader():
            log.warning("lost leadership while generating version %d (%s): not published",
                        version, reason, extra={"reason": reason, "version": version})
            return None
        fence = self._leader.fence()
        now = self._clock.now()
        barrier = Barrier.opened(version, frozenset(model.containers), now)
        # the barrier exists before the pointer makes the version visible: an ack can never
        # find a published version without one
        published = await self._io(lambda: self._models.publish(
            model, self._versions.pointer, fence,
            before_pointer=lambda: self._barriers.save(barrier)))
        if not published:
            log.error("version %d (%s) refused by the store: another leader published first "
                      "or this replica's epoch %d is stale; reloading", version, reason,
                      self._leader.epoch, extra={"reason": reason, "version": version})
            await self._io(self._load)
            self._versions.notify()
            raise Fenced(f"job model version {version} was fenced by a newer publication")
        self._versions.pointer = (self._versions.pointer or 0) + 1
        self._versions.latest, self._versions.barrier = model, barrier
        self._versions.keep(model)
        await self._io(lambda: self._store.watch(BARRIERS, f"{version:020d}",
                                                 self._barrier_watch(version)))
        self.rebalances.append(RebalanceRecord(version, reason, now, seconds, prepare_seconds))
        tasks = sum(len(c.active_tasks) for c in model.containers.values())
        self._observer.job_model_generated(reason, seconds, tasks)
        log.info("published job model version %d (%s): %d tasks on %d processors, generated "
                 "in %.3fs, rendered in %.3fs", version, reason, tasks, len(model.containers),
                 seconds, prepare_seconds,
                 extra={"reason": reason, "version": version})
        if barrier.state is BarrierState.DONE:
            await self._keeper.done(barrier)
        else:
            self._schedule("barrier-timeout", self.config.barrier_timeout_s,
                           lambda: self._keeper.timeout(version))
        self._versions.notify()
        return model

    # ------------------------------------------------------------------ fencing

    async def model(self, version: int) -> JobModel | None:
        """The job model of ``version`` (cached), or None."""
        return await self._versions.model(version)

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
        active = self._versions.active
        if active is None or version > active.version:
            # Another replica may have completed the barrier a moment ago (its watch
            # has not reached us yet): look at the store before refusing.
            await self._refresh()
            active = self._versions.active
        if active is None:
            raise Fenced("no job model is active yet: nothing may be committed")
        return await self._fence.check(active, processor_id, version, task_names)

    # ------------------------------------------------------------------ helpers

    def _schedule(self, name: str, delay_s: float, action: Callable[[], Awaitable[None]]) -> None:
        if self._scheduler is not None:
            self._scheduler.schedule(name, delay_s, action)

    def _cancel(self, name: str) -> None:
        if self._scheduler is not None:
            self._scheduler.cancel(name)

    async def _io(self, fn: Callable[[], T]) -> T:
        return await asyncio.to_thread(fn)

