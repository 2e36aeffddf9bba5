"""The ``coxswain`` command: serve, db upgrade/downgrade, and clients of a running server.

    coxswain serve --input kafka.orders:8          # embedded coordinator on SQLite
    coxswain status | processors | scale 4          # talk to a running server (--url)
    coxswain db upgrade | downgrade                 # schema migrations
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import ssl
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from service.local.orders import EXAMPLE_TOPICS

if TYPE_CHECKING:
    from common.tls import ClientTls
    from service.settings import Settings

SUPPRESS = argparse.SUPPRESS

SERVE_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--host", {"help": "address to listen on (default 127.0.0.1)"}),
    ("--port", {"type": int, "help": "port (default 8080)"}),
    ("--data-dir", {"help": "folder of the embedded SQLite store (default ./coxswain-data)"}),
    ("--store", {"help": "SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db"}),
    ("--input", {"action": "append", "metavar": "SYSTEM.STREAM[:PARTITIONS]",
                 "help": "an input stream and its partition count (repeatable); without "
                         "a count, discovered from --kafka-bootstrap; kinesis.STREAM: its "
                         "shards, from --kinesis-endpoint"}),
    ("--grouper", {"help": "GroupByPartition | GroupBySystemStreamPartition | "
                           "AllSspToSingleTask"}),
    ("--elasticity-factor", {"type": int, "help": "initial elasticity factor (power of two)"}),
    ("--max-elasticity-factor", {"type": int, "help": "largest factor /scale accepts (64)"}),
    ("--stateful", {"action": "store_true", "help": "tasks have local state (KIP-441)"}),
    ("--lease-ttl-ms", {"type": int, "help": "processor lease TTL (10000)"}),
    ("--heartbeat-interval-ms", {"type": int, "help": "heartbeat interval told to workers"}),
    ("--debounce-ms", {"type": int, "help": "rebalance debounce after join/leave (1000)"}),
    ("--barrier-timeout-ms", {"type": int, "help": "barrier timeout (30000)"}),
    ("--barrier-max-ms", {"type": int, "help": "how long from its start a barrier waits "
                                             "for processors that heartbeat and "
                                             "report handing over (120000)"}),
    ("--probing-interval-ms", {"type": int, "help": "probing rebalance interval (600000)"}),
    ("--probing-min-interval-ms", {"type": int, "help": "probing rebalances triggered by "
                                                        "caught-up warm-ups, at most once "
                                                        "per this (5000); at or above "
                                                        "--probing-interval-ms: timer only"}),
    ("--poll-close-grace-ms", {"type": int, "help": "a processor whose long poll's "
                                                    "connection closes and that shows no "
                                                    "life within this leaves at once "
                                                    "(1500; 0: wait for the lease TTL)"}),
    ("--acceptable-recovery-lag", {"type": int, "help": "KIP-441 caught-up lag (10000)"}),
    ("--autosize-sample-interval-ms", {"type": int, "help": "how often the autosizer "
                                                            "samples the workers' stats "
                                                            "(5000)"}),
    ("--autosize-window-ms", {"type": int, "help": "the autosizer's window (60000)"}),
    ("--num-standbys", {"type": int, "help": "standby replicas per stateful task (0)"}),
    ("--max-warmup-replicas", {"type": int, "help": "warm-ups at once (2)"}),
    ("--balance-factor", {"type": int, "help": "allowed max-min task difference (1)"}),
    ("--reset-policy", {"choices": ["earliest", "latest"],
                        "help": "where key spaces without checkpoints start"}),
    ("--bucket-signal-min-records", {"type": int, "help": "judge a partition's empty and "
                                                          "hot key buckets once this many "
                                                          "of its records were sampled "
                                                          "(1000)"}),
    ("--key-hash", {"choices": ["xxhash64", "crc32"],
                    "help": "the hash of a record key's bucket (default: the job's own; "
                            "xxhash64 for a new job). A job keeps its function: a change "
                            "is refused while key-bucket checkpoints depend on it"}),
    ("--max-body-bytes", {"type": int, "help": "request body limit (8 MiB)"}),
    ("--max-wait-ms", {"type": int, "help": "longest long poll a client may ask for (60000)"}),
    ("--body-timeout-ms", {"type": int, "help": "408 for a request body slower than this "
                                                "between chunks (30000)"}),
    ("--header-timeout-ms", {"type": int, "help": "close a connection whose request headers "
                                                  "take longer than this (10000)"}),
    ("--keep-job-models", {"type": int, "help": "job model versions kept in the store (10)"}),
    ("--kafka-bootstrap", {"help": "Kafka bootstrap servers: inputs given as SYSTEM.STREAM "
                                   "(no count) get their partition count from Kafka"}),
    ("--partition-poll-interval-ms", {"type": int,
                                      "help": "how often partition counts (Kafka) and shards "
                                              "(Kinesis) are polled (30000)"}),
    ("--kinesis-endpoint", {"help": "Kinesis API endpoint URL for kinesis.STREAM inputs "
                                    "(default: AWS's for the region)"}),
    ("--kinesis-region", {"help": "AWS region of the Kinesis streams (default: "
                                  "$AWS_REGION, else us-east-1)"}),
    ("--metadata-store", {"choices": ["sql", "zookeeper", "kafka"],
                          "help": "where job models, leases and locality live (default: "
                                  "zookeeper with --zk, else the SQL store)"}),
    ("--zk", {"help": "ZooKeeper HOST:PORT[,...][/chroot]: leader-elected replicas sharing "
                      "job models, leases and barriers there (checkpoints stay in --store)"}),
    ("--job", {"help": "job name; its ZooKeeper root is /coxswain/{job} (default 'default')"}),
    ("--zk-session-timeout-ms", {"type": int, "help": "ZooKeeper session timeout (6000)"}),
    ("--leader-lease-ms", {"type": int, "help": "leadership lease on a shared SQL store "
                                                "without --zk: one coordinator leads it (10000)"}),
    ("--worker-token", {"help": "bearer token of worker routes"}),
    ("--admin-token", {"help": "bearer token of operator routes"}),
    ("--insecure", {"action": "store_true",
                    "help": "allow a non-loopback address without tokens"}),
    ("--tls-cert", {"help": "serve HTTPS with this certificate chain (PEM file), with "
                            "--tls-key"}),
    ("--tls-key", {"help": "the private key of --tls-cert (PEM file)"}),
    ("--tls-client-ca", {"help": "mutual TLS: require client certificates signed by this "
                                 "CA (PEM file)"}),
    ("--replica-id", {"help": "this replica's id (default hostname-pid)"}),
    ("--log-json", {"action": "store_true", "help": "one JSON object per log line"}),
    ("--log-level", {"help": "DEBUG | INFO | WARNING (INFO), then LOGGER=LEVEL "
                              "overrides, e.g. INFO,coxswain.leader=DEBUG"}),
]


def _settings(args: argparse.Namespace) -> Settings:
    # imported here: pydantic-settings is half a second of a client command's start
    # (`coxswain scale` took 19 s at load 20), which never reads settings
    from pydantic import ValidationError

    from service.settings import Settings, SettingsError

    given = {k: v for k, v in vars(args).items()
             if k not in ("command", "url", "token", "json", "action", "config", "func")}
    if getattr(args, "config", None):
        given["config_file"] = args.config
    try:
        return Settings(**given)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}"
                             for err in e.errors())
        raise SystemExit(f"coxswain: invalid settings: {problems}") from None
    except SettingsError as e:
        raise SystemExit(f"coxswain: {e}") from None


def _serve(args: argparse.Namespace) -> None:
    import uvicorn

    from common.tls import TlsConfigError
    from coordinator.sql_leader import LeadershipHeld
    from coordinator.store_lock import StoreLocked
    from service.app import create_app, store_leader, store_lock
    from service.http_protocol import protocol_options
    from service.logs import configure
    from service.settings import SettingsError

    settings = _settings(args)
    try:
        settings.check_bind_is_safe()
    except SettingsError as e:
        raise SystemExit(f"coxswain: {e}") from None
    try:
        configure(settings.log_json, settings.log_level)
    except ValueError as e:
        raise SystemExit(f"coxswain: --log-level: {e}") from None
    # one leader per store in the modes without an election: before serving anything
    lock = store_lock(settings)
    leader = None
    try:
        if lock is not None:
            lock.acquire()  # held until this process exits
        leader = store_leader(settings, on_lost=lambda: os.kill(os.getpid(), signal.SIGTERM))
    except (StoreLocked, LeadershipHeld) as e:
        raise SystemExit(f"coxswain: {e}") from None
    tls = settings.server_tls()
    try:
        tls_options = tls.uvicorn_options() if tls is not None else {}
    except TlsConfigError as e:
        raise SystemExit(f"coxswain: {e}") from None
    try:
        uvicorn.run(create_app(settings, store_leader=leader), host=settings.host,
                    port=settings.port, log_config=None, timeout_graceful_shutdown=5,
                    **protocol_options(settings.header_timeout_ms / 1000), **tls_options)
    finally:
        if leader is not None:
            leader.stop()  # gives the lease up: a successor need not wait it out


def _db(args: argparse.Namespace) -> None:
    from service.database import current_revision, downgrade, make_engine, upgrade

    settings = _settings(args)
    engine = make_engine(settings.store_url())
    if args.action == "upgrade":
        upgrade(engine)
    else:
        downgrade(engine)
    print(f"schema at revision {current_revision(engine) or 'base (empty)'}")
    engine.dispose()


def _client_tls_options(p: argparse.ArgumentParser) -> None:
    """``--ca-file``, ``--client-cert`` and ``--client-key``: a client of an HTTPS
    coordinator (``--tls-cert``; mutual TLS with ``--tls-client-ca``)."""
    p.add_argument("--ca-file", default=os.environ.get("COXSWAIN_CA_FILE"),
                   help="trust the coordinator's certificate from this CA bundle (PEM; "
                        "default $COXSWAIN_CA_FILE, else the system's CAs)")
    p.add_argument("--client-cert", default=os.environ.get("COXSWAIN_CLIENT_CERT"),
                   help="present this certificate (PEM) to a coordinator requiring client "
                        "certificates (default $COXSWAIN_CLIENT_CERT), with --client-key")
    p.add_argument("--client-key", default=os.environ.get("COXSWAIN_CLIENT_KEY"),
                   help="the private key of --client-cert (default $COXSWAIN_CLIENT_KEY)")


def _client_tls(args: argparse.Namespace) -> ClientTls | None:
    """The TLS options a client command was given (None: none), checked."""
    from common.tls import ClientTls, TlsConfigError

    if not (args.ca_file or args.client_cert or args.client_key):
        return None
    try:
        tls = ClientTls(args.ca_file, args.client_cert, args.client_key)
        tls.context()  # the files read now: a wrong path is told before anything starts
    except TlsConfigError as e:
        raise SystemExit(f"coxswain: {e}") from None
    return tls


def _verify(args: argparse.Namespace) -> ssl.SSLContext | bool:
    """What a client verifies the coordinator with (True: the system's CAs)."""
    tls = _client_tls(args)
    return True if tls is None else tls.context()


def _client(args: argparse.Namespace) -> httpx.Client:
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    return httpx.Client(base_url=args.url, headers=headers, timeout=30, verify=_verify(args))


def _call(args: argparse.Namespace, method: str, path: str, **kw: Any) -> Any:
    try:
        with _client(args) as client:
            response = client.request(method, path, **kw)
    except httpx.HTTPError as e:
        raise SystemExit(f"coxswain: cannot reach {args.url}: {e}") from None
    if response.status_code >= 400:
        try:
            body = response.json()
            reason = f"{body.get('error')}: {body.get('detail')}"
        except ValueError:
            reason = response.text
        raise SystemExit(f"coxswain: {method} {path} failed ({response.status_code}) {reason}")
    return response.json()


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(map(str, headers))] + [[("-" if v is None else str(v)) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _status(args: argparse.Namespace) -> None:
    s = _call(args, "GET", "/status")
    if args.json:
        print(json.dumps(s, indent=2))
        return
    last = s.get("lastRebalance") or {}
    print(f"leader {s['leaderId']}  latest version {s['latestVersion']}  active version "
          f"{s['activeVersion']}  barrier {s['barrier']}  elasticity factor "
          f"{s['elasticityFactor']}  balance {s['balance']} (most minus fewest active "
          "tasks on a processor)")
    if last:
        print(f"last rebalance: version {last['version']} ({last['reason']})")
    rows = [(p["processorId"], p["locationId"], p["activeTasks"], p["standbyTasks"])
            for p in s["processors"]]
    print(_table(["PROCESSOR", "LOCATION", "ACTIVE", "STANDBY"], rows))


def _processors(args: argparse.Namespace) -> None:
    if args.action == "remove":
        if not args.processor_id:
            raise SystemExit("coxswain: processors remove needs a processor id")
        with _client(args) as client:
            try:
                r = client.delete(f"/processors/{args.processor_id}")
            except httpx.HTTPError as e:
                raise SystemExit(f"coxswain: cannot reach {args.url}: {e}") from None
        if r.status_code != 204:
            try:
                body = r.json()
                reason = f"{body.get('error')}: {body.get('detail')}"
            except ValueError:
                reason = r.text
            raise SystemExit(f"coxswain: removing {args.processor_id} failed "
                             f"({r.status_code}) {reason}")
        print(f"processor {args.processor_id} removed: its tasks move at the next rebalance")
        return
    procs = _call(args, "GET", "/processors")
    if args.json:
        print(json.dumps(procs, indent=2))
        return
    rows = [(p["processorId"], p["locationId"], p["host"], len(p["tasks"])) for p in procs]
    print(_table(["PROCESSOR", "LOCATION", "HOST", "TASKS"], rows))


def _scale(args: argparse.Namespace) -> None:
    answer = _call(args, "POST", "/scale", json={"elasticityFactor": args.factor})
    print(f"elasticity factor {args.factor}: job model version {answer['jobModelVersion']}")


def _dev_up(args: argparse.Namespace) -> None:
    from service.local.kafka import BrokerStartTimeout, LocalKafka
    from service.local.kinesis import CREDENTIALS as KINESIS_CREDENTIALS
    from service.local.kinesis import LocalKinesis, create_stream
    from service.local.orders import create_topics
    from service.local.zookeeper import ZooKeeperEnsemble

    # Installed before anything starts: a SIGTERM that arrives while the servers start (or
    # just after the banner) must still stop them, not kill this process and orphan them.
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("starting ZooKeeper (Debian package) and Kafka (KRaft, jars from Maven Central; "
          "the first start downloads them)...", flush=True)
    zk = ZooKeeperEnsemble.start(1, client_port=args.zk_port)
    kafka: LocalKafka | None = None
    kinesis: LocalKinesis | None = None
    try:
        kafka = LocalKafka.create(port=args.kafka_port)
        try:
            kafka.start(args.start_timeout_s)  # assigned first: an interrupted start stops
        except BrokerStartTimeout as e:
            kafka = None  # stopped already; its folder and log are kept for a look
            raise SystemExit(f"coxswain: {e}. Try again (a second start is faster: the "
                             "jars are fetched and the JVM warm), or give it longer: "
                             "coxswain dev up --start-timeout-s 300") from None
        created = create_topics(kafka.bootstrap, args.topics)
        topics = ", ".join(f"{name} ({n} partitions{'' if name in created else ', existed'})"
                           for name, n in args.topics)
        kinesis_lines = ""
        if args.kinesis:
            kinesis = LocalKinesis.start(port=args.kinesis_port)
            create_stream(kinesis.endpoint, "orders", args.kinesis_shards)
            aws = " ".join(f"{k}={v}" for k, v in KINESIS_CREDENTIALS.items())
            kinesis_lines = (
                f"Kinesis:   {kinesis.endpoint} (kinesalite; stream orders, "
                f"{args.kinesis_shards} shards)\n\nwith Kinesis instead of Kafka input:\n"
                f"  {aws} coxswain serve --input kinesis.orders --kinesis-endpoint "
                f"{kinesis.endpoint}\n"
                f"  {aws} coxswain dev produce --kinesis-endpoint {kinesis.endpoint}\n"
                f"  {aws} coxswain worker --kinesis-endpoint {kinesis.endpoint} "
                f"--kafka-bootstrap {kafka.bootstrap} --api task --app "
                "examples.enrich_task:process_task --output-topic orders-enriched\n")
        # the first topic is the input, a second the output (the defaults' roles)
        source = args.topics[0][0]
        sink = args.topics[1][0] if len(args.topics) > 1 else "OUTPUT-TOPIC"
        print(f"ZooKeeper: {zk.connect_string}\nKafka:     {kafka.bootstrap}\n"
              f"topics:    {topics}\n" + kinesis_lines + "\ntry, each in its own terminal:\n"
              f"  coxswain serve --zk {zk.connect_string} --kafka-bootstrap {kafka.bootstrap}"
              f" --input kafka.{source}\n"
              f"  coxswain dev produce --kafka-bootstrap {kafka.bootstrap} --topic {source}\n"
              f"  coxswain worker --kafka-bootstrap {kafka.bootstrap} "
              "--api task --app examples.first_job:process_task --output-topic "
              f"{sink}\n"
              "(Ctrl-C stops the servers)", flush=True)
        try:
            while not stop.wait(1.0):
                if not kafka.running:
                    raise SystemExit("coxswain: the Kafka broker exited; see "
                                     f"{kafka.data_dir / 'server.log'}")
        except KeyboardInterrupt:
            pass
    finally:
        print("stopping...", flush=True)
        if kinesis is not None:
            kinesis.stop()
        if kafka is not None:
            kafka.destroy()
        zk.stop()


def _dev_produce(args: argparse.Namespace) -> None:
    from service.local.orders import produce_orders, produce_orders_to_kinesis

    if args.rate <= 0 or args.keys < 1 or (args.count is not None and args.count < 1):
        raise SystemExit("coxswain: --rate, --keys and --count must be positive")
    stop = threading.Event()  # Ctrl-C and SIGTERM end it after a flush: nothing half-sent
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    where = (f"Kinesis stream {args.topic}" if args.kinesis_endpoint else args.topic)
    print(f"producing orders of {args.keys} customers into {where} at {args.rate:g}/s "
          f"({'until Ctrl-C' if args.count is None else f'{args.count} in all'})", flush=True)
    if args.kinesis_endpoint:
        sent = produce_orders_to_kinesis(
            args.kinesis_endpoint, args.kinesis_region or os.environ.get("AWS_REGION"),
            args.topic, args.rate, args.keys, lambda: not stop.is_set(), count=args.count)
    else:
        sent = produce_orders(args.kafka_bootstrap, args.topic, args.rate, args.keys,
                              lambda: not stop.is_set(), count=args.count)
    print(f"produced {sent} orders", flush=True)


def _demo(args: argparse.Namespace) -> None:
    _require_worker_extra("demo")
    from service.demo import Demo, DemoPlan

    bad = [f for f in args.factors if f < 1 or f > 64 or f & (f - 1)]
    if bad:
        raise SystemExit(f"coxswain: elasticity factors must be powers of two in 1..64: {bad}")
    if min(args.partitions, args.keys, args.rate, args.workers) < 1 or args.stage_seconds <= 0:
        raise SystemExit("coxswain: --partitions, --keys, --rate, --workers and "
                         "--stage-seconds must be positive")
    plan = DemoPlan(partitions=args.partitions, keys=args.keys, rate=args.rate,
                    factors=tuple(args.factors), stage_s=args.stage_seconds,
                    workers=args.workers, spark_master=args.spark_master,
                    stateful=args.stateful)
    raise SystemExit(Demo(plan).run())


def _autosize(args: argparse.Namespace) -> None:
    from service.autosize_loop import Applier, run
    from service.logs import configure

    configure(json_lines=False, level="INFO")
    if args.interval_s <= 0 or args.cooldown_s < 0:
        raise SystemExit("coxswain: --interval-s must be positive and --cooldown-s >= 0")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends it quietly
        run(args.url, args.token, args.apply, args.interval_s, args.min_factor,
            args.max_factor, Applier(args.cooldown_s, args.confirmations),
            keep_going=lambda: not stop.is_set(), sleep=stop.wait, verify=_verify(args))


def _require_worker_extra(command: str) -> None:
    """A clear error when the PySpark worker's packages are not installed."""
    import importlib.util

    missing = [m for m in ("pyspark", "pandas", "pyarrow", "rocksdict", "obstore")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"coxswain {command} needs the worker's packages ({', '.join(missing)} "
                         "missing): pip install 'coxswain[worker]', or ./deploy/setup.sh "
                         "--worker in a checkout")


class _Terminations:
    """SIGTERM over a worker's whole life, from before its imports to its exit: the first
    asks for a stop (cancel a start, or hand over and leave), the later ones change
    nothing (a supervisor that repeats SIGTERM must not cut a handover short)."""

    def __init__(self) -> None:
        self.received = 0
        self.requested = threading.Event()
        self.on_first: Callable[[], None] | None = None

    def __call__(self, *_: object) -> None:
        self.received += 1
        if self.received == 1:
            self.requested.set()
            if self.on_first is not None:
                self.on_first()

    def then(self, action: Callable[[], None]) -> None:
        """Run ``action`` at the first SIGTERM (now, if it came already)."""
        self.on_first = action
        if self.requested.is_set():
            action()


def _worker(args: argparse.Namespace) -> None:
    terminations = _Terminations()
    signal.signal(signal.SIGTERM, terminations)
    _require_worker_extra("worker")

    from service.logs import configure
    from worker.cut_signals import HttpSignals
    from worker.output.exactly_once import ExactlyOnce
    from worker.runtime import (
        NotAStatefulJob,
        QueryDied,
        Worker,
        WorkerConfig,
        spark_session,
        stop_spark,
        task_api,
    )
    from worker.runtime.app import (
        AppError,
        check_on_executors,
        is_local_master,
        load_app,
        py_files,
        shipment,
    )
    from worker.runtime.query_failures import app_file
    from worker.runtime.spark import parse_conf
    from worker.state.blobs import BlobStoreOptions
    from worker.state.tasks import StateConfig

    try:
        configure(json_lines=False, level=args.log_level)
    except ValueError as e:
        raise SystemExit(f"coxswain worker: --log-level: {e}") from None
    try:
        spark_conf = parse_conf(args.conf)
        extra_files = py_files(args.py_files)
        module, user_function = load_app(args.app, extra_files)
    except (ValueError, AppError) as e:
        raise SystemExit(f"coxswain: {e}") from None
    process_batch = (task_api(user_function, args.output_topic, args.kafka_bootstrap)
                     if args.api == "task" else user_function)
    if args.target_batch_ms is not None and args.target_batch_ms <= 0:
        raise SystemExit("coxswain: --target-batch-ms must be positive")
    target_batch_s = None if args.target_batch_ms is None else args.target_batch_ms / 1000
    if args.query_restarts < 0 or args.query_restart_window_s <= 0:
        raise SystemExit("coxswain: --query-restarts must be 0 or more and "
                         "--query-restart-window-s positive")
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        raise SystemExit("coxswain: --max-offsets-per-trigger must be at least 1")
    state = None
    if args.stateful:
        if args.api != "task":
            raise SystemExit("coxswain: --stateful needs --api task (state lives per task)")
        if not is_local_master(args.spark_master) and not args.blob_store:
            # the default store is a folder beside the driver's state dir, which
            # executors on other hosts never see
            raise SystemExit(
                f"coxswain: --stateful on a cluster master ({args.spark_master}) needs "
                "--blob-store: the executors keep task state and back it up there, so "
                "every executor host must reach it (s3://BUCKET/PREFIX, or file:///DIR "
                "on a folder every host mounts at the same path)")
        if args.blob_gc_grace_s <= 0:
            raise SystemExit("coxswain: --blob-gc-grace-s must be positive: blobs of a "
                             "backup still uploading are kept for that long")
        state_dir = Path(args.state_dir).resolve()
        try:
            blob_options = BlobStoreOptions(
                args.blob_store_timeout_ms / 1000, args.blob_store_connect_timeout_ms / 1000,
                args.blob_store_retries, args.blob_store_retry_timeout_ms / 1000)
        except ValueError as e:
            raise SystemExit(f"coxswain: {e}") from None
        state = StateConfig(state_dir, args.blob_store
                            or f"file://{state_dir.parent / 'coxswain-blobs'}",
                            args.blob_store_endpoint, args.blob_gc_interval_s,
                            args.blob_gc_grace_s, blob_options)
    if state is not None and not is_local_master(args.spark_master):
        # a task pinned to its executor (worker.cluster.placement) waits this long for a core
        # there, busy with a standby fetch, before Spark runs it elsewhere, where its
        # state would have to be restored (Spark's default: 3 s)
        spark_conf.setdefault("spark.locality.wait.process", "10s")
    exactly_once = None
    if args.exactly_once:
        if args.api != "task" or not args.output_topic:
            raise SystemExit("coxswain: --exactly-once needs --api task and --output-topic: "
                             "the worker writes process_task's rows itself, in the "
                             "transaction of their commit")
        if not is_local_master(args.spark_master):
            # the driver-side write works anywhere, but no test runs it on a cluster yet
            raise SystemExit(f"coxswain: --exactly-once runs on a local Spark master only "
                             f"(--spark-master local[N]) for now, not {args.spark_master}: "
                             "no test has run it on a cluster yet")
        if args.kafka_reader == "jvm":
            # the two would fit (both read committed records only), but no test has run
            # them together: refused rather than trusted untested
            raise SystemExit("coxswain: --exactly-once runs with --kafka-reader python only "
                             "for now: no test has run it with the JVM reader yet")
        exactly_once = ExactlyOnce.for_output(args.kafka_bootstrap, args.output_topic,
                                              args.exactly_once_log)
    elif args.exactly_once_log:
        raise SystemExit("coxswain: --exactly-once-log is for --exactly-once")
    if args.api == "task" and args.output_topic:
        from worker.output.topic import OutputTopicMissing, check_output_topic

        try:  # before anything starts: a typo is told now, not at the first output
            check_output_topic(args.kafka_bootstrap, args.output_topic)
        except OutputTopicMissing as e:
            raise SystemExit(f"coxswain: {e}") from None
    config = WorkerConfig(
        coordinator=args.coordinator, kafka_bootstrap=args.kafka_bootstrap,
        processor_id=args.processor_id, location=args.location or socket.gethostname(),
        token=args.token or os.environ.get("COXSWAIN_WORKER_TOKEN"),
        tls=_client_tls(args),
        spark_master=args.spark_master,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        target_batch_s=target_batch_s,
        max_commit_delay_s=args.max_commit_delay_ms / 1000, api=args.api,
        output_topic=args.output_topic, state=state,
        kinesis_endpoint=args.kinesis_endpoint,
        kinesis_region=args.kinesis_region or os.environ.get("AWS_REGION"),
        executor_state_dir=args.executor_state_dir, exactly_once=exactly_once,
        kafka_reader=args.kafka_reader,
        bucket_sample_interval_s=args.bucket_sample_interval_ms / 1000,
        query_restarts=args.query_restarts,
        query_restart_window_s=args.query_restart_window_s,
        app_files=(app_file(module, hasattr(sys.modules.get(module), "__path__")),),
        task_hosts=not is_local_master(args.spark_master) and not args.location)
    if terminations.requested.is_set():
        return  # stopped before Spark started: nothing to hand over
    # a SIGTERM while Spark starts is kept for later, so its JVM is still stopped by us
    ship_folder = tempfile.TemporaryDirectory(prefix="coxswain-app-")
    to_ship = shipment(module, extra_files, Path(ship_folder.name), args.spark_master)
    # named for the processor: one application per worker in a cluster's UI
    app_name = f"coxswain-worker {args.processor_id}" if args.processor_id else \
        "coxswain-worker"
    archive = None
    if args.jvm_class_archive == "auto":
        from common.paths import cache_dir
        from worker.runtime.class_archive import class_archive

        archive = class_archive(cache_dir() / "jvm")
        if archive is not None and archive.exists:
            logging.getLogger("coxswain.worker").info(
                "the driver's JVM maps the class archive %s", archive.path)
        elif archive is not None:
            logging.getLogger("coxswain.worker").info(
                "no JVM class archive for this Java and PySpark at %s: Spark starts "
                "without one (python -m worker.runtime.make_class_archive makes it once; "
                "workers then start seconds faster)", archive.path)
    spark = spark_session(args.spark_master, app_name=app_name, conf=spark_conf,
                          executor_python=args.executor_python, class_archive=archive)
    # then it cancels the warm-up job, so a worker stopped while it starts exits in
    # seconds, well within a supervisor's grace period (py4j off the handler's frame)
    terminations.then(lambda: threading.Thread(target=spark.sparkContext.cancelAllJobs,
                                               daemon=True).start())
    stop = terminations.requested
    # a cluster's executors read cut signals from the driver over HTTP
    signals = None if is_local_master(args.spark_master) else HttpSignals(
        spark.conf.get("spark.driver.host") or "127.0.0.1")
    try:
        to_ship.add_to(spark)
        # before registering: an executor that cannot import the app fails the worker in
        # seconds, holding no lease, instead of failing its first batch (four attempts)
        if (args.api == "task" or not is_local_master(args.spark_master)) \
                and not stop.is_set():
            try:
                hosts = check_on_executors(spark, module, args.app.partition(":")[2],
                                           None if signals is None else signals.where)
                if signals is not None and not args.location and len(hosts) == 1:
                    # the tasks' state lives where they run: that host is the location
                    # host affinity weighs (one executor host: an application per worker)
                    config = dataclasses.replace(config, location=hosts[0])
            except AppError as e:
                raise SystemExit(f"coxswain worker: {e}") from None
            except Exception:
                if not stop.is_set():
                    raise
        worker = Worker(config, process_batch, spark, cut_signals=signals)
        terminations.then(worker.stop)
        if not stop.is_set():
            worker.run()
    except KeyboardInterrupt:
        pass
    except (NotAStatefulJob, QueryDied) as e:  # it left; Spark stops below
        raise SystemExit(f"coxswain worker: {e}") from None
    finally:
        stop_spark(spark)
        ship_folder.cleanup()
        if signals is not None:
            signals.close()
        # handed over, left, Spark stopped: what remains is the interpreter's exit,
        # during which Python would restore SIGTERM's default action (death, -15)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if terminations.received > 1:
            logging.getLogger("coxswain.worker").info(
                "%d SIGTERMs received: the first stopped the worker, the others changed "
                "nothing", terminations.received)


def plain(text: str) -> str:
    """Docstring markup (RST double backticks) out of text meant for a terminal."""
    return text.replace("``", "")


def _topic(spec: str) -> tuple[str, int]:
    from service.local.orders import parse_topic

    try:
        return parse_topic(spec)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


class _Defaults(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in the help, except where there is none to show (None) or the help
    text names it already ("(default: the hostname)")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or "default" in text.lower():
            return text
        return super()._get_help_string(action)


def parser() -> argparse.ArgumentParser:
    """The argument parser of ``coxswain``."""
    defaults = _Defaults
    p = argparse.ArgumentParser(prog="coxswain", description=plain(__doc__.splitlines()[0]))
    sub = p.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run a coordinator", argument_default=SUPPRESS)
    serve.add_argument("--config", help="YAML or TOML file with settings")
    for flag, kw in SERVE_OPTIONS:
        serve.add_argument(flag, **kw)
    serve.set_defaults(func=_serve)

    db = sub.add_parser("db", help="schema migrations", argument_default=SUPPRESS)
    db.add_argument("action", choices=["upgrade", "downgrade"])
    db.add_argument("--store", help="SQLAlchemy URL")
    db.add_argument("--data-dir", help="folder of the embedded SQLite store")
    db.add_argument("--config", help="YAML or TOML file with settings")
    db.set_defaults(func=_db)

    for name, func, help_ in (("status", _status, "show the coordinator's status"),
                              ("processors", _processors, "list registered processors, "
                               "or remove one (processors remove ID)")):
        c = sub.add_parser(name, help=help_, description=help_)
        c.add_argument("--json", action="store_true", help="print the raw JSON")
        c.set_defaults(func=func)
        if name == "processors":
            c.add_argument("action", nargs="?", choices=["list", "remove"], default="list",
                           help="remove: the processor leaves now and a rebalance moves "
                                "its tasks (an operator's call: the admin token with "
                                "--token, or none on a deployment without tokens)")
            c.add_argument("processor_id", nargs="?", metavar="ID")
    scale = sub.add_parser("scale", help="set the elasticity factor",
                           description="set the elasticity factor (a power of two)")
    scale.add_argument("factor", type=int, help="key buckets per input partition")
    scale.set_defaults(func=_scale)
    for name in ("status", "processors", "scale"):
        c = sub.choices[name]
        c.add_argument("--url", default=os.environ.get("COXSWAIN_URL", "http://127.0.0.1:8080"),
                       help="the coordinator (default $COXSWAIN_URL or %(default)s)")
        c.add_argument("--token", default=os.environ.get("COXSWAIN_TOKEN"),
                       help="bearer token, admin token for scale (default $COXSWAIN_TOKEN)")
        _client_tls_options(c)
        c.set_defaults(client=True)

    w = sub.add_parser("worker", help="run a PySpark worker (one processor)",
                       description="run a PySpark worker (one processor)",
                       formatter_class=defaults)
    w.add_argument("--coordinator", default=os.environ.get("COXSWAIN_URL",
                                                           "http://127.0.0.1:8080"),
                   help="the coordinator's URL, or its replicas' URLs comma-separated "
                        "(tried in turn when one is unreachable) ($COXSWAIN_URL)")
    w.add_argument("--app", required=True, help="module:function: process_batch(df, ctx), "
                   "or process_task(ctx, rows) with --api task")
    w.add_argument("--api", choices=["batch", "task"], default="batch",
                   help="batch: one DataFrame per micro-batch; task: pandas rows per "
                        "virtual task, in offset order")
    w.add_argument("--output-topic", help="Kafka topic for the rows process_task returns")
    w.add_argument("--kafka-bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap")
    w.add_argument("--exactly-once", action="store_true",
                   help="exactly-once output (--api task with --output-topic): each "
                        "commit's output and checkpoint in one Kafka transaction; readers "
                        "use isolation.level=read_committed")
    w.add_argument("--exactly-once-log", metavar="TOPIC",
                   help="the checkpoint log of --exactly-once (one partition, compacted; "
                        "created if missing; default: OUTPUT_TOPIC.coxswain-checkpoints)")
    w.add_argument("--kinesis-endpoint", help="Kinesis API endpoint URL for kinesis inputs "
                                              "(default: AWS's for the region)")
    w.add_argument("--kinesis-region", help="AWS region of the Kinesis streams (default: "
                                            "$AWS_REGION, else us-east-1)")
    w.add_argument("--processor-id", help="this processor's id (default: assigned by the "
                   "coordinator)")
    w.add_argument("--location", help="location id for host affinity (default: the hostname)")
    # not shown as a default: a token does not belong in --help output
    _client_tls_options(w)
    w.add_argument("--token", default=None, help="worker bearer token (default "
                   "$COXSWAIN_WORKER_TOKEN)")
    w.add_argument("--spark-master", default="local[2]", help="Spark master URL: "
                   "local[N], or a cluster's (spark://HOST:PORT, k8s://...; see "
                   "docs/cluster.md)")
    w.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting, repeatable (e.g. spark.executor.memory=2g, "
                        "spark.driver.host=ADDRESS)")
    w.add_argument("--py-files", action="append", default=[], metavar="FILES",
                   help="comma-separated .py, .zip or .egg files the app needs beside "
                        "its own module, added to the driver's and executors' path, "
                        "repeatable (on a cluster the --app module's own file or package "
                        "is shipped without it, unless installed)")
    w.add_argument("--jvm-class-archive", choices=("auto", "off"), default="auto",
                   help="auto: the driver's JVM maps the class-data archive made by "
                        "`python -m worker.runtime.make_class_archive` (deploy/setup.sh makes "
                        "it) when there is one for this Java and PySpark: a faster start")
    w.add_argument("--executor-python", help="the Python interpreter executors run, with "
                   "coxswain[worker] installed on every executor host (default: "
                   "$PYSPARK_PYTHON, else the one running this worker)")
    w.add_argument("--max-offsets-per-trigger", type=int,
                   help="records per micro-batch: in all on Kafka (split across "
                        "partitions; default: no limit), per shard on Kinesis (default: "
                        "10000)")
    w.add_argument("--kafka-reader", choices=("python", "jvm"), default="python",
                   help="who reads the Kafka ranges Coxswain's source plans for each "
                        "batch: its consumers in Spark's Python workers (python), or "
                        "Spark's own Kafka connector (jvm). Either way one query for the "
                        "worker's life; which is faster depends on the job "
                        "(bench/RESULTS.md)")
    w.add_argument("--query-restarts", type=int, default=5,
                   help="a query that dies of anything but the app's code (a Python "
                        "worker that did not connect back or crashed, a lost connection) "
                        "is started again in the worker, its tasks from their "
                        "checkpoints, at most this many times within "
                        "--query-restart-window-s (0: the worker exits, as on a failure "
                        "in the app's code)")
    w.add_argument("--query-restart-window-s", type=float, default=600.0,
                   help="the window --query-restarts counts in")
    w.add_argument("--target-batch-ms", type=int,
                   help="Kafka: with a backlog, micro-batches are sized to take about "
                        "this long; never more records than --max-offsets-per-trigger. "
                        "Default 8000 with --api task (a change cuts the batch in flight "
                        "short, so long batches cost a handover little and pay each "
                        "batch's fixed cost less often), 1000 with --api batch (a "
                        "handover waits for the batch in flight)")
    w.add_argument("--max-commit-delay-ms", type=int, default=60_000,
                   help="longest a batch's checkpoint commit may lag behind it")
    w.add_argument("--bucket-sample-interval-ms", type=int, default=30_000,
                   help="process_batch apps: count one batch's records per key bucket "
                        "this often (one small Spark job; process_task apps count every "
                        "batch as it runs, at no cost), for the coordinator's empty- and "
                        "hot-bucket signals (0: never, either API)")
    w.add_argument("--stateful", action="store_true",
                   help="process_task keeps per-key state (ctx.state) in RocksDB under "
                        "--state-dir, backed up to --blob-store and restored where tasks go")
    w.add_argument("--state-dir", default="./coxswain-state",
                   help="this processor's task state (with --stateful, on local[N])")
    w.add_argument("--executor-state-dir", default="coxswain-state",
                   help="on a cluster master, where each executor keeps the state of the "
                        "tasks it runs, on its own host (relative: under the executor's "
                        "own folder, gone with the application; an absolute path keeps it "
                        "for the next application on that host)")
    w.add_argument("--blob-store", help="file:///DIR or s3://BUCKET[/PREFIX] for state "
                   "backups (default: file://<state dir>/../coxswain-blobs)")
    w.add_argument("--blob-store-endpoint", help="an S3-compatible service's URL "
                   "(credentials from the usual AWS variables)")
    w.add_argument("--blob-store-timeout-ms", type=int, default=60_000,
                   help="longest one blob store request may take (an upload, or one "
                        "part of a multipart one)")
    w.add_argument("--blob-store-connect-timeout-ms", type=int, default=5_000,
                   help="longest a connection to the blob store may take to open")
    w.add_argument("--blob-store-retries", type=int, default=3,
                   help="retries of one failed blob store request (5xx, connection "
                        "errors, timeouts) before its commit fails; a failed commit is "
                        "tried again with backoff until the store is back")
    w.add_argument("--blob-store-retry-timeout-ms", type=int, default=30_000,
                   help="no retry of one request begins after this")
    w.add_argument("--blob-gc-interval-s", type=float, default=600.0,
                   help="how often the collecting processor deletes blobs no retained "
                        "checkpoint needs (0: never)")
    w.add_argument("--blob-gc-grace-s", type=float, default=3600.0,
                   help="indexes and blobs younger than this are always kept")
    w.add_argument("--log-level", default="INFO",
                   help="DEBUG | INFO | WARNING, then LOGGER=LEVEL overrides, e.g. "
                        "INFO,coxswain.worker.batches=DEBUG (each batch's ranges, starts, "
                        "cuts and commit)")
    w.set_defaults(func=_worker)

    dev = sub.add_parser("dev", help="local services for trying the full system",
                         description="local services for trying the full system")
    dev_sub = dev.add_subparsers(dest="action", required=True)
    up = dev_sub.add_parser(
        "up", formatter_class=defaults, help="start ZooKeeper and Kafka until Ctrl-C",
        description="Start a ZooKeeper server and a Kafka broker (KRaft) on this machine and "
                    "create the examples' topics; Ctrl-C or SIGTERM stops both.")
    up.add_argument("--zk-port", type=int, default=2181, help="ZooKeeper client port")
    up.add_argument("--kafka-port", type=int, default=9092, help="Kafka listener port")
    up.add_argument("--start-timeout-s", type=float, default=120.0,
                    help="how long the Kafka broker may take to start (its log says "
                         "when it has)")
    up.add_argument("--topic", dest="topics", type=_topic, action="append",
                    metavar="NAME[:PARTITIONS]",
                    help="a topic to create, repeatable (default: "
                         + ", ".join(f"{n}:{c}" for n, c in EXAMPLE_TOPICS) + ")")
    up.add_argument("--kinesis", action="store_true",
                    help="also a local Kinesis API (kinesalite, npm) with a stream 'orders'")
    up.add_argument("--kinesis-port", type=int, default=4567, help="Kinesis API port")
    up.add_argument("--kinesis-shards", type=int, default=4, help="shards of 'orders'")
    up.set_defaults(func=_dev_up)
    produce = dev_sub.add_parser(
        "produce", formatter_class=defaults, help="produce keyed example orders",
        description="Produce orders keyed by customer (JSON values with a per-customer "
                    "sequence number) until Ctrl-C or --count.")
    produce.add_argument("--kafka-bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap")
    produce.add_argument("--topic", default="orders", help="topic (or Kinesis stream) to "
                                                            "produce into")
    produce.add_argument("--kinesis-endpoint", help="produce into a Kinesis stream at this "
                                                    "endpoint instead of Kafka")
    produce.add_argument("--kinesis-region", help="AWS region (default: $AWS_REGION, else "
                                                  "us-east-1)")
    produce.add_argument("--rate", type=float, default=50.0, help="orders per second")
    produce.add_argument("--keys", type=int, default=100, help="distinct customers")
    produce.add_argument("--count", type=int, help="stop after this many (default: never)")
    produce.set_defaults(func=_dev_produce)

    auto = sub.add_parser(
        "autosize", formatter_class=defaults,
        help="follow GET /autosize and (with --apply) change the elasticity factor",
        description="Read the coordinator's autosize recommendation every --interval-s and "
                    "log each decision with its figures; with --apply, POST /scale when "
                    "the same direction is recommended --confirmations times in a row, at "
                    "most once per --cooldown-s, never down while the backlog grows. "
                    "Processor counts are reported, not applied.")
    auto.add_argument("--url", default=os.environ.get("COXSWAIN_URL", "http://127.0.0.1:8080"),
                      help="the coordinator ($COXSWAIN_URL)")
    auto.add_argument("--token", default=os.environ.get("COXSWAIN_TOKEN"),
                      help="admin token for POST /scale ($COXSWAIN_TOKEN)")
    _client_tls_options(auto)
    auto.add_argument("--apply", action="store_true", help="change the factor (default: "
                                                           "only log what it would do)")
    auto.add_argument("--interval-s", type=float, default=15.0, help="seconds between reads")
    auto.add_argument("--min-factor", type=int, help="lowest factor to recommend")
    auto.add_argument("--max-factor", type=int, help="highest factor to recommend")
    auto.add_argument("--cooldown-s", type=float, default=300.0,
                      help="at most one change per this many seconds")
    auto.add_argument("--confirmations", type=int, default=2,
                      help="the same direction recommended this many times in a row first")
    auto.set_defaults(func=_autosize)

    demo = sub.add_parser(
        "demo", formatter_class=defaults,
        help="Kafka, a coordinator and two Spark workers on this machine, scaling "
             "1 -> 4 -> 2 while orders flow; a live table; everything stopped after",
        description="Kafka, a coordinator and Spark workers on this machine, scaling while "
                    "orders flow, with a live table and a loss and order check; everything "
                    "it starts is stopped after.")
    demo.add_argument("--partitions", type=int, default=4, help="input topic partitions")
    demo.add_argument("--keys", type=int, default=2000, help="distinct customers (keys)")
    demo.add_argument("--rate", type=int, default=200, help="orders produced per second")
    demo.add_argument("--factors", type=int, nargs="+", default=[1, 4, 2],
                      help="elasticity factors to go through, in order")
    demo.add_argument("--stage-seconds", type=float, default=30.0,
                      help="how long each factor runs, once it is in effect (its version's "
                           "barrier done and every worker running it)")
    demo.add_argument("--workers", type=int, default=2, help="Spark workers (processors)")
    demo.add_argument("--spark-master", default="local[2]", help="each worker's master")
    demo.add_argument("--stateful", action="store_true",
                      help="keep a running total per customer in task state, split and "
                           "merged with the elasticity factor, and check every total")
    demo.set_defaults(func=_demo)
    return p


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``coxswain`` command."""
    args = parser().parse_args(argv)
    if getattr(args, "action", None) == "up" and args.topics is None:
        args.topics = list(EXAMPLE_TOPICS)
    if getattr(args, "client", False):
        # a client's output piped into `head`: end quietly as Unix tools do, no traceback
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args.func(args)
    sys.exit(0)


if __name__ == "__main__":
    main()
