"""The ``coxswain`` command: serve, db upgrade/downgrade, and clients of a running server.

    coxswain serve --input kafka.orders:8          # embedded coordinator on SQLite
    coxswain status | processors | scale 4          # talk to a running server (--url)
    coxswain db upgrade | downgrade                 # schema migrations
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import ssl
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import httpx

from service.commands.options import (
    add_client_tls_options,
    add_token_options,
    argv_secret_warning,
    client_tls,
    resolve_token,
    warn,
)
from service.commands.worker import add_worker_command, require_worker_extra
from service.local.orders import EXAMPLE_TOPICS

if TYPE_CHECKING:
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
    ("--kafka-config", {"action": "append", "metavar": "FILE",
                        "help": "a properties file of Kafka client settings (librdkafka "
                                "names: security.protocol, sasl.*, ssl.*), for the "
                                "partition monitor and the Kafka metadata store"}),
    ("--kafka-option", {"action": "append", "metavar": "KEY=VALUE",
                        "help": "one Kafka client setting, repeatable; a secret as "
                                "${env:NAME} or ${file:PATH}, never literally"}),
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
    ("--zk-auth-file", {"help": "a file holding USER:PASSWORD: the coordinator "
                                "authenticates to ZooKeeper with digest auth and creates "
                                "its znodes readable and writable by that identity only "
                                "(or $COXSWAIN_ZK_AUTH)"}),
    ("--zk-auth-scheme", {"choices": ["digest", "sasl"],
                          "help": "how --zk-auth-file's identity authenticates: digest "
                                  "(default), or sasl (DIGEST-MD5; the ensemble needs a "
                                  "SASL authentication provider)"}),
    ("--zk-session-timeout-ms", {"type": int, "help": "ZooKeeper session timeout (6000)"}),
    ("--leader-lease-ms", {"type": int, "help": "leadership lease on a shared SQL store "
                                                "without --zk: one coordinator leads it (10000)"}),
    ("--worker-token-file", {"help": "read the bearer token of worker routes from this "
                                     "file (or $COXSWAIN_WORKER_TOKEN)"}),
    ("--admin-token-file", {"help": "read the bearer token of operator routes from this "
                                    "file (or $COXSWAIN_ADMIN_TOKEN)"}),
    ("--worker-token", {"help": "the worker routes' token itself (visible to every user "
                                "of the host: prefer --worker-token-file)"}),
    ("--admin-token", {"help": "the operator routes' token itself (visible to every user "
                               "of the host: prefer --admin-token-file)"}),
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
    from coordinator.leadership.sql import LeadershipHeld
    from coordinator.leadership.store_lock import StoreLocked
    from service.app import create_app, store_leader, store_lock
    from service.logs import configure
    from service.serving.protocol import protocol_options
    from service.settings import SettingsError

    for flag in ("admin_token", "worker_token"):
        if flag in vars(args):
            name = "--" + flag.replace("_", "-")
            warn(argv_secret_warning(name, f"{name}-file FILE or $COXSWAIN_{flag.upper()}"))
    settings = _settings(args)
    try:
        settings.check_bind_is_safe()
    except SettingsError as e:
        raise SystemExit(f"coxswain: {e}") from None
    try:
        configure(settings.log_json, settings.log_level)
    except ValueError as e:
        raise SystemExit(f"coxswain: --log-level: {e}") from None
    _check_kafka(settings)
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


def _check_kafka(settings: Settings) -> None:
    """Secured Kafka settings checked before serving: a misspelled name or credentials
    the brokers refuse end the start with the reason (brokers that do not answer yet
    are only warned about: the partition monitor retries)."""
    from common.kafka_clients import KafkaSettingsError, verify

    kafka = settings.kafka_client()
    if kafka is None:
        return
    try:
        unanswered = verify(kafka)
    except KafkaSettingsError as e:
        raise SystemExit(f"coxswain: {e}") from None
    if unanswered is not None:
        logging.getLogger("coxswain").warning(
            "the Kafka brokers at %s did not answer (%s); going on", kafka.bootstrap,
            unanswered)


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


def _verify(args: argparse.Namespace) -> ssl.SSLContext | bool:
    """What a client verifies the coordinator with (True: the system's CAs)."""
    tls = client_tls(args)
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
    require_worker_extra("demo")
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
    from service.autosize.loop import Applier, run
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
        add_token_options(c, "COXSWAIN_TOKEN", "bearer token (the admin token for scale)")
        add_client_tls_options(c)
        c.set_defaults(client=True)

    add_worker_command(sub, defaults)

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
    add_token_options(auto, "COXSWAIN_TOKEN", "admin token for POST /scale")
    add_client_tls_options(auto)
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
    if hasattr(args, "token_env"):
        resolve_token(args)
    if getattr(args, "client", False):
        # a client's output piped into `head`: end quietly as Unix tools do, no traceback
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args.func(args)
    sys.exit(0)


if __name__ == "__main__":
    main()
