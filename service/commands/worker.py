"""``coxswain worker``: one processor, a PySpark application that registers with the
coordinator, takes tasks and runs the user's app on them (``worker.runtime``)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.file_lock import FileLock, FileLocked
from common.kafka_clients import KafkaSettingsError
from common.paths import cache_dir
from service.commands.options import (
    add_client_tls_options,
    add_kafka_options,
    add_token_options,
    client_tls,
    kafka_settings,
)
from worker.runtime.driver_batches import MOST_RECORDS  # (pure: no PySpark needed)

if TYPE_CHECKING:
    from common.kafka_clients import KafkaClientSettings
    from worker.state.tasks import StateConfig


def require_worker_extra(command: str) -> None:
    """A clear error when the PySpark worker's packages are not installed."""
    import importlib.util

    missing = [m for m in ("pyspark", "pandas", "pyarrow", "rocksdict", "obstore")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"coxswain {command} needs the worker's packages ({', '.join(missing)} "
                         "missing): pip install 'coxswain[worker]', or ./deploy/setup.sh "
                         "--worker in a checkout")


class Terminations:
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

    def interrupt(self, signum: int, frame: object) -> None:
        """Ctrl-C: the first stops the worker as SIGTERM does (its tasks handed over
        with their last commit, then it leaves); one more stops it at once."""
        if self.received:
            raise KeyboardInterrupt
        print("coxswain worker: stopping (handing over its tasks; Ctrl-C again to stop "
              "at once)", file=sys.stderr, flush=True)
        self(signum, frame)

    def then(self, action: Callable[[], None]) -> None:
        """Run ``action`` at the first SIGTERM (now, if it came already)."""
        self.on_first = action
        if self.requested.is_set():
            action()


def hold_state_dir(state_dir: Path) -> FileLock:
    """This worker's state dir, locked for its life: two workers of one host sharing one
    (the default ``./coxswain-state`` of both) would restore, compose and delete each
    other's task folders. The second is refused at start, naming the first."""
    lock = FileLock(state_dir / ".worker.lock")
    try:
        return lock.acquire()  # kept open until the process exits (the kernel frees it)
    except FileLocked as e:
        raise SystemExit(
            f"coxswain: another worker (pid {e.holder}) uses the state dir {state_dir}: "
            "give each worker on a host its own --state-dir (e.g. --state-dir "
            "./coxswain-state-2)") from None


def start_checks(args: argparse.Namespace, kafka: KafkaClientSettings,
                 state: StateConfig | None) -> None:
    """The worker's checks at start (``worker.start_checks``): the broker answers, the
    output topic and the job's input topics are there, the blob store answers."""
    from worker.client import CoordinatorClient
    from worker.start_checks import (
        broker_topics,
        check_blob_store,
        check_input_topics,
        check_output_topic,
        job_inputs,
    )

    if args.output_topic or not args.kinesis_endpoint:  # the job reads or writes Kafka
        topics = broker_topics(kafka)
        if args.api == "task" and args.output_topic:
            check_output_topic(topics, args.output_topic, kafka.bootstrap)
        tls = client_tls(args)
        client = CoordinatorClient(args.coordinator, args.token, retry_for_s=0,
                                   request_timeout_s=5.0,
                                   verify=tls.context() if tls is not None else True)
        try:
            status = client.status()
        except Exception as e:
            logging.getLogger("coxswain.worker").info(
                "the job's input topics not checked: the coordinator did not answer (%s)", e)
        else:
            check_input_topics(topics, job_inputs(status), kafka.bootstrap)
        finally:
            client.close()
    if state is not None and state.blob_store.startswith("s3:"):
        check_blob_store(state.blob_store, state.blob_store_endpoint,
                         state.blob_store_options)


def run_worker(args: argparse.Namespace) -> None:
    """``coxswain worker``."""
    terminations = Terminations()
    signal.signal(signal.SIGTERM, terminations)
    # SIGINT as a shell gave it: a worker started in the background of a script ignores
    # it (the terminal's Ctrl-C is the script's), one in the foreground stops on it
    on_interrupt = signal.SIG_IGN if signal.getsignal(signal.SIGINT) == signal.SIG_IGN \
        else terminations.interrupt
    signal.signal(signal.SIGINT, on_interrupt)
    require_worker_extra("worker")

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
    from worker.runtime.task_api import task_api
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
    kafka = kafka_settings(args, refuse_unanswered=True)  # (told once, not warned of)
    try:
        process_batch = (task_api(user_function, args.output_topic, kafka)
                         if args.api == "task" else user_function)
    except KafkaSettingsError as e:
        raise SystemExit(f"coxswain: {e}") from None
    if args.target_batch_ms is not None and args.target_batch_ms <= 0:
        raise SystemExit("coxswain: --target-batch-ms must be positive")
    target_batch_s = None if args.target_batch_ms is None else args.target_batch_ms / 1000
    if args.query_restarts < 0 or args.query_restart_window_s <= 0:
        raise SystemExit("coxswain: --query-restarts must be 0 or more and "
                         "--query-restart-window-s positive")
    if args.trigger_interval_ms < 1:
        raise SystemExit("coxswain: --trigger-interval-ms must be at least 1")
    if args.driver_batch_records < 0:
        raise SystemExit("coxswain: --driver-batch-records must be 0 (off) or more")
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
        if is_local_master(args.spark_master):
            hold_state_dir(state_dir)
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
        exactly_once = ExactlyOnce.for_output(kafka, args.output_topic,
                                              args.exactly_once_log)
    elif args.exactly_once_log:
        raise SystemExit("coxswain: --exactly-once-log is for --exactly-once")
    try:  # before anything starts: a first hour's mistakes are told now, in one line
        start_checks(args, kafka, state)
    except ValueError as e:
        raise SystemExit(f"coxswain: {e}") from None
    config = WorkerConfig(
        coordinator=args.coordinator, kafka_bootstrap=kafka.bootstrap, kafka_client=kafka,
        processor_id=args.processor_id, location=args.location or socket.gethostname(),
        token=args.token, tls=client_tls(args),
        spark_master=args.spark_master,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        target_batch_s=target_batch_s,
        max_commit_delay_s=args.max_commit_delay_ms / 1000, api=args.api,
        trigger_interval_s=args.trigger_interval_ms / 1000,
        driver_batch_records=args.driver_batch_records,
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
        from worker.jvm.class_archive import class_archive

        archive = class_archive(cache_dir() / "jvm")
        if archive is not None and archive.exists:
            logging.getLogger("coxswain.worker").info(
                "the driver's JVM maps the class archive %s", archive.path)
        elif archive is not None:
            logging.getLogger("coxswain.worker").info(
                "no JVM class archive for this Java and PySpark at %s: Spark starts "
                "without one (python -m worker.jvm.make_class_archive makes it once; "
                "workers then start seconds faster)", archive.path)
    spark = spark_session(args.spark_master, app_name=app_name, conf=spark_conf,
                          executor_python=args.executor_python, class_archive=archive,
                          spark_homes=cache_dir() / "jvm")
    # PySpark's context takes SIGINT over (cancel every job, KeyboardInterrupt): a
    # Ctrl-C would cut the batch in flight and skip the handover's last commit
    signal.signal(signal.SIGINT, on_interrupt)
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
        if args.api == "task" and not stop.is_set():
            warm_up(spark, process_batch, args.processor_id or "", exactly_once is not None,
                    config.task_reads)
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


def warm_up(spark: Any, process_batch: Any, processor_id: str, exactly_once: bool,
            kafka: KafkaClientSettings | None = None) -> None:
    """The batch path run once before the worker takes tasks (``worker.runtime.warm_up``;
    an exactly-once worker's output collected, as its batches' is): a speed-up only, so a
    failure is logged and the worker starts all the same."""
    from grouping.key_hash import DEFAULT_KEY_HASH
    from worker.runtime.warm_up import warm_batch_path

    log = logging.getLogger("coxswain.worker")
    try:
        took = warm_batch_path(spark, process_batch, processor_id, DEFAULT_KEY_HASH,
                               (lambda output: None) if exactly_once else None, kafka)
    except Exception as e:
        log.warning("the batch path was not warmed up (%s): the first batch does that work",
                    str(e).splitlines()[0] if str(e) else type(e).__name__)
    else:
        log.info("the batch path warmed up in %.1fs", took)


def add_worker_command(sub: Any, defaults: type[argparse.HelpFormatter]) -> None:
    """The ``worker`` subcommand of ``sub`` (the ``coxswain`` subparsers)."""
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
    add_kafka_options(w)
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
    add_client_tls_options(w)
    add_token_options(w, "COXSWAIN_WORKER_TOKEN", "worker bearer token")
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
                        "`python -m worker.jvm.make_class_archive` (deploy/setup.sh makes "
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
    w.add_argument("--trigger-interval-ms", type=int, default=250,
                   help="how often the query looks for new records while batches take "
                        "less (Spark's processing-time trigger): a record waits for the "
                        "next trigger, half of this on average; each idle trigger asks "
                        "the brokers for the partitions' ends once")
    w.add_argument("--driver-batch-records", type=int, default=MOST_RECORDS,
                   help="--api task on Kafka, local master: a batch of at most this many "
                        "records that the driver estimates at 50 ms or less runs in the "
                        "driver itself, without a Spark job (one running Python costs "
                        "~100 ms on a small host); 0: every batch runs in Spark")
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
    w.set_defaults(func=run_worker)
