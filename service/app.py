"""The app factory: ``create_app(settings)`` wires stores, coordinator, metrics and routes.

Its lifespan opens the store (applying migrations), starts the coordinator and stops both
on shutdown. Nothing lives in module globals: everything hangs off ``app.state``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from fastapi import FastAPI
from sqlalchemy import Engine

from checkpoint.store.sql import SqlCheckpointStore
from coordinator.autosize import Policy
from coordinator.clock import Clock, SystemClock
from coordinator.input_monitors.partitions import KafkaPartitionSource, PartitionMonitor
from coordinator.input_monitors.shards import KinesisShardSource, ShardMonitor
from coordinator.leadership.role import EmbeddedLeader, LeaderRole
from coordinator.leadership.sql import SqlLeaseLeader
from coordinator.leadership.store_lock import StoreLock, sqlite_database
from coordinator.leadership.zookeeper import ZkLeader
from coordinator.lifecycle import Coordinator, CoordinatorConfig
from coordinator.store.kafka import KafkaMetadataStore
from coordinator.store.metadata import MetadataStore
from coordinator.store.sql import SqlMetadataStore
from coordinator.store.zookeeper import ZkMetadataStore, ZkSession
from grouping.assignment import AssignmentParams
from grouping.model import JobModel
from grouping.shards import Shard
from service.autosize.bucket_watch import BucketWatch
from service.autosize.window import Autosizer, sample_of
from service.database import make_engine, upgrade
from service.docs import install_docs
from service.errors import error_response, install_error_handlers
from service.heap import FrozenHeap
from service.metrics import Metrics
from service.routes import (
    autosize,
    checkpoints,
    health,
    jobmodel,
    page,
    processors,
    scale,
    status,
)
from service.serving.poll_shortcut import PollShortcut
from service.serving.post_shortcuts import PostShortcuts
from service.settings import Settings
from service.status_page import templates

log = logging.getLogger("coxswain.service")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def coordinator_config(settings: Settings) -> CoordinatorConfig:
    """The lifecycle's config from the service settings."""
    return CoordinatorConfig(
        inputs=tuple(settings.inputs()),
        monitored_streams=tuple(settings.monitored_streams()),
        shard_streams=tuple(settings.shard_streams()),
        grouper=settings.grouper,
        elasticity_factor=settings.elasticity_factor,
        max_elasticity_factor=settings.max_elasticity_factor,
        stateful=settings.stateful,
        lease_ttl_s=settings.lease_ttl_ms / 1000,
        heartbeat_interval_s=settings.heartbeat_interval_ms / 1000,
        debounce_s=settings.debounce_ms / 1000,
        barrier_timeout_s=settings.barrier_timeout_ms / 1000,
        barrier_max_s=max(settings.barrier_max_ms, settings.barrier_timeout_ms) / 1000,
        probing_interval_s=settings.probing_interval_ms / 1000,
        probing_min_interval_s=settings.probing_min_interval_ms / 1000,
        poll_close_grace_s=settings.poll_close_grace_ms / 1000,
        assignment=AssignmentParams(
            balance_factor=settings.balance_factor,
            acceptable_recovery_lag=settings.acceptable_recovery_lag,
            num_standbys=settings.num_standbys,
            max_warmup_replicas=settings.max_warmup_replicas,
        ),
        keep_job_models=settings.keep_job_models,
        reset_policy=settings.reset_policy,
        key_hash=settings.key_hash,
    )


def store_lock(settings: Settings) -> StoreLock | None:
    """The lock that makes an embedded coordinator the only one on its SQLite store (the
    embedded mode has no election: two processes on one store would both lead). None when
    another mode elects or fences (ZooKeeper, the coordinator stream) or the store is not
    a SQLite file."""
    database = sqlite_database(settings.store_url())
    if settings.metadata_backend() != "sql" or database is None:
        return None
    return StoreLock(database)


def store_leader(settings: Settings, on_lost: Callable[[], None]) -> SqlLeaseLeader | None:
    """The leadership lease of a coordinator on a shared SQL store without ZooKeeper,
    taken (waiting out a crashed holder's lease; ``LeadershipHeld`` when a live one keeps
    it), or None in the other modes."""
    if settings.metadata_backend() != "sql" or sqlite_database(settings.store_url()):
        return None
    engine = make_engine(settings.store_url())
    upgrade(engine)
    leader = SqlLeaseLeader(SqlMetadataStore(engine), settings.replica_id,
                            settings.leader_lease_ms / 1000, on_lost=on_lost)
    leader.acquire()
    return leader


def partition_monitor(settings: Settings, coordinator: Coordinator) -> PartitionMonitor | None:
    """The Kafka partition monitor, when inputs are given without a partition count."""
    streams = settings.monitored_streams()
    kafka = settings.kafka_client()
    if not streams or kafka is None:
        return None
    return PartitionMonitor(
        streams, KafkaPartitionSource(kafka),
        settings.partition_poll_interval_ms / 1000, lambda: coordinator.inputs,
        coordinator.update_inputs, coordinator.leader.is_leader)


def shard_monitor(settings: Settings, coordinator: Coordinator,
                  checkpoints: SqlCheckpointStore) -> ShardMonitor | None:
    """The Kinesis shard monitor, when there are kinesis.STREAM inputs. Shards that left
    the listing (closed, then trimmed after retention) have their checkpoints forgotten
    once the job model no longer has them: nothing is left to read in them, and no child
    waits for a parent the lineage no longer lists."""
    streams = settings.shard_streams()
    if not streams:
        return None

    async def apply(system: str, stream: str, shards: Mapping[int, Shard]) -> None:
        gone = await coordinator.update_shards(system, stream, shards)
        if gone:
            removed = await asyncio.to_thread(checkpoints.forget, gone)
            log.info("shards gone from %s.%s (%s): %d checkpoint entries forgotten", system,
                     stream, ", ".join(str(p.partition) for p in gone), removed)

    return ShardMonitor(
        streams, KinesisShardSource(settings.kinesis_endpoint, settings.kinesis_region),
        settings.partition_poll_interval_ms / 1000, apply, coordinator.leader.is_leader)


@asynccontextmanager
async def metadata_backend(
    settings: Settings, engine: Engine, sql_leader: SqlLeaseLeader | None = None,
) -> AsyncIterator[tuple[MetadataStore, LeaderRole, Callable[[Coordinator], None]]]:
    """The metadata store and leader role of ``settings``: embedded SQL with this process
    as the leader, or ZooKeeper with an election. Also returns how to connect the
    coordinator to leadership changes, once it started."""
    backend = settings.metadata_backend()
    if backend == "sql":
        if sql_leader is None:
            yield SqlMetadataStore(engine), EmbeddedLeader(settings.replica_id), lambda _: None
            return
        leading_now: list[Coordinator] = []

        def changed(leading: bool) -> None:
            for coordinator in leading_now:
                coordinator.leadership_changed(leading)

        sql_leader.set_on_change(changed)
        sql_leader.start()
        yield SqlMetadataStore(engine), sql_leader, leading_now.append
        return
    if backend == "kafka":
        kafka = settings.kafka_client()
        assert kafka is not None
        stream = KafkaMetadataStore(kafka, settings.job, settings.replica_id)
        await asyncio.to_thread(stream.start)
        try:
            yield stream, EmbeddedLeader(settings.replica_id), lambda _: None
        finally:
            await asyncio.to_thread(stream.close)
        return
    assert settings.zk is not None
    session = ZkSession(settings.zk, settings.zk_session_timeout_ms / 1000,
                        identity=settings.zk_identity())
    await asyncio.to_thread(session.start)
    root = f"/coxswain/{settings.job}"
    try:
        await asyncio.to_thread(session.protect, root)
    except BaseException:
        await asyncio.to_thread(session.stop)
        raise
    store = ZkMetadataStore(session.client, root)
    bound: list[Coordinator] = []

    def on_change(leading: bool) -> None:
        for coordinator in bound:
            coordinator.leadership_changed(leading)

    leader = ZkLeader(session.client, store, f"{root}/leader/election", settings.replica_id,
                      on_change=on_change)

    def bind(coordinator: Coordinator) -> None:
        bound.append(coordinator)
        leader.start()

    try:
        yield store, leader, bind
    finally:
        await asyncio.to_thread(leader.stop)
        await asyncio.to_thread(session.stop)


def create_app(settings: Settings, clock: Clock | None = None,
               store_leader: SqlLeaseLeader | None = None) -> FastAPI:
    """A Coxswain coordinator app for ``settings``; ``store_leader``: the leadership lease
    already taken on a shared SQL store without ZooKeeper (see :func:`store_leader`)."""
    clock = clock or SystemClock()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings.store_url())
        upgrade(engine)
        metrics = Metrics()
        async with metadata_backend(settings, engine, store_leader) as (store, leader, bind):
            # The leader renews leases in memory between writes on the embedded store (no
            # other replica) and on ZooKeeper (a leader that loses its connection stops
            # leading at once, so it writes again and meets the outage). On a shared SQL
            # store a leader keeps its leadership lease for a while through an outage, and
            # on the coordinator stream a redeployed replica learns it was deposed only
            # when it writes: there every heartbeat is written, and answered 503 (retry
            # elsewhere) when it cannot be, never with a 200 that recorded nothing.
            coalesce = settings.metadata_backend() == "zookeeper" or (
                settings.metadata_backend() == "sql" and store_leader is None)
            # the embedded store (SQLite, held by its exclusive lock) has this one replica
            sole = settings.metadata_backend() == "sql" and store_leader is None
            config = replace(coordinator_config(settings), lease_write_through=not coalesce,
                             sole_replica=sole)
            heap = FrozenHeap()
            render = jobmodel.Prerenderer()

            def prepare(model: JobModel) -> None:
                render(model)  # the answers' JSON, off the event loop
                heap.settled()  # and the collector off the new model

            checkpoints = SqlCheckpointStore(engine)
            coordinator = Coordinator(config, store, leader, clock, metrics, prepare=prepare,
                                      generation_scope=heap.generating,
                                      hash_dependent_entries=checkpoints.hash_dependent_entries)
            app.state.settings = settings
            app.state.metadata_store = store
            app.state.checkpoints = checkpoints
            app.state.metrics = metrics
            app.state.coordinator = coordinator
            # processors warned about for registering without keyHashes (once each)
            app.state.undeclared_key_hashes = set()
            metrics.export_task_lags(coordinator.membership.task_lags)
            metrics.export_state_restores(coordinator.membership.stats,
                                          coordinator.latest_task_names)
            metrics.export_query_restarts(coordinator.membership.stats)
            app.state.clock = clock
            buckets = BucketWatch(coordinator.membership.stats, coordinator.elasticity_factor,
                                  metrics.key_buckets, settings.bucket_signal_min_records)
            app.state.bucket_watch = buckets
            sizer = Autosizer(
                lambda: sample_of(coordinator.membership.stats(),
                                  len(coordinator.membership.live()),
                                  coordinator.elasticity_factor(), time.monotonic(),
                                  buckets.check()),
                Policy(max_factor=settings.max_elasticity_factor,
                       window_s=settings.autosize_window_ms / 1000,
                       min_span_s=settings.autosize_window_ms / 3000),
                lambda r: metrics.recommended(r.elasticity_factor, r.processors),
                settings.autosize_sample_interval_ms / 1000)
            app.state.autosizer = sizer
            await coordinator.start()
            bind(coordinator)
            sizer.start()
            heap.start()
            monitor = partition_monitor(settings, coordinator)
            app.state.partition_monitor = monitor
            if monitor is not None:
                monitor.start()
            shards = shard_monitor(settings, coordinator, app.state.checkpoints)
            app.state.shard_monitor = shards
            if shards is not None:
                shards.start()
            log.info("coordinator %s serving job %r with %d input partitions (metadata: %s; "
                     "checkpoints: %s)", settings.replica_id, settings.job,
                     len(coordinator.inputs), settings.metadata_backend(),
                     engine.url.render_as_string(hide_password=True))
            try:
                yield
            finally:
                if monitor is not None:
                    await monitor.stop()
                if shards is not None:
                    await shards.stop()
                await sizer.stop()
                await heap.stop()
                await coordinator.stop()
                engine.dispose()

    app = FastAPI(
        title="Coxswain",
        version="1",
        description="Job coordinator for elastic stream processing on PySpark.",
        lifespan=lifespan,
        docs_url=None,  # service.docs serves them from packaged assets
        redoc_url=None,
        **_without_telemetry(),
    )
    app.state.settings = settings
    app.state.templates = templates()
    install_error_handlers(app)
    install_docs(app)
    for module in (health, processors, jobmodel, checkpoints, scale, status, autosize, page):
        app.include_router(module.router)
    app.add_middleware(PostShortcuts)  # inside the body limit: gets the whole body
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes,
                       read_timeout_s=settings.body_timeout_ms / 1000)
    app.add_middleware(PollShortcut)
    return app


def _without_telemetry() -> dict[str, Any]:
    """FastAPI's native OpenTelemetry off (where this FastAPI has it): it looks for
    configured providers on every request, tens of microseconds each at 500 heartbeats a
    second, and Coxswain exports Prometheus metrics instead."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    return {"telemetry": {"tracing": False, "metrics": False, "logs": False}}


class BodyLimit:
    """Read each request body whole, up to ``limit`` bytes, before any route sees it:
    413 above the limit (also for a chunked body, whose size only shows while reading),
    408 when the client sends it slower than ``read_timeout_s`` between chunks, and
    nothing at all when the client disconnects meanwhile (no route runs, nothing is
    written, nothing is logged as an error). The route then gets the body in one piece."""

    def __init__(self, app: ASGIApp, limit: int, read_timeout_s: float = 30.0) -> None:
        self.app = app
        self.limit = limit
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                await _refuse(scope, receive, send, 413, "payload_too_large",
                              f"request body larger than {self.limit} bytes")
                return
        chunks: list[bytes] = []
        seen = 0
        more = True
        while more:
            try:
                # a timeout scope, not wait_for: no task per request
                async with asyncio.timeout(self.read_timeout_s):
                    message = await receive()
            except TimeoutError:
                await _refuse(scope, receive, send, 408, "request_timeout",
                              f"request body not received within {self.read_timeout_s:g}s")
                return
            if message["type"] != "http.request":
                return  # the client went away before its request was whole
            body = message.get("body", b"")
            seen += len(body)
            if seen > self.limit:
                await _refuse(scope, receive, send, 413, "payload_too_large",
                              f"request body larger than {self.limit} bytes")
                return
            chunks.append(body)
            more = bool(message.get("more_body", False))
        replayed = False

        async def whole() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # e.g. http.disconnect, for a long poll
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope, whole, send)


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, code: str,
                  detail: str) -> None:
    response = error_response(status, code, detail)
    response.headers["connection"] = "close"
    await response(scope, receive, send)
