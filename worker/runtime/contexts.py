"""How a worker runs (its configuration), and what user code gets beside its rows."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.kafka_clients import KafkaClientSettings, plain
from common.tls import ClientTls
from grouping.key_hash import KeyHash
from worker.cuts import CutPlan
from worker.runtime.app import is_local_master
from worker.runtime.driver_batches import MOST_RECORDS
from worker.state.executor import ExecutorStatePlan
from worker.state.store import TaskStore
from worker.state.tasks import StateConfig, no_state

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

    # (the driver's: a Python worker running tasks never needs it, nor its clients)
    from worker.output.exactly_once import ExactlyOnce
    from worker.runtime.task_reads import TaskReads

#: the columns user code sees: Kafka input
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "keyBucket",
           "taskName")
#: Kinesis input: key = partition key, value = data, topic = stream, partition = the
#: shard's number (shard: its id); sequence numbers are decimal strings (beyond int64)
KINESIS_COLUMNS = ("key", "value", "topic", "partition", "shard", "sequenceNumber",
                   "approximateArrivalTimestamp", "keyBucket", "taskName")


@dataclass(frozen=True)
class WorkerConfig:
    """How a worker runs."""

    coordinator: str
    kafka_bootstrap: str
    processor_id: str | None = None
    location: str = field(default_factory=socket.gethostname)
    token: str | None = None
    # an HTTPS coordinator: the CA bundle its certificate is checked with (None: the
    # system's CAs) and, for mutual TLS, the worker's certificate
    tls: ClientTls | None = None
    spark_master: str = "local[2]"
    max_offsets_per_trigger: int | None = None
    max_commit_delay_s: float = 60.0
    api: str = "batch"  # or "task": process_task(ctx, rows) per virtual task
    output_topic: str | None = None  # where process_task's returned rows go
    trigger_interval_s: float = 0.25
    # Kafka: batches with a backlog sized to take about this long (``worker.batch_size``;
    # None: by the api, ``batch_size.default_target_s``)
    target_batch_s: float | None = None
    checkpoint_root: Path | None = None
    state: StateConfig | None = None  # process_task keeps per-key state (ctx.state)
    kinesis_endpoint: str | None = None  # Kinesis inputs: the API endpoint (default AWS's)
    kinesis_region: str | None = None
    # a cluster master's executors keep task state here, on their hosts (relative: under
    # each executor's own folder)
    executor_state_dir: str = "coxswain-state"
    # exactly-once output (``--exactly-once``): process_task's rows and each commit's
    # checkpoint record written in one Kafka transaction per commit
    exactly_once: ExactlyOnce | None = None
    # who reads a Kafka batch the source planned: its consumers in Spark's Python workers
    # ("python"), or Spark's own Kafka connector ("jvm", ``worker.sources.jvm_kafka``)
    kafka_reader: str = "python"
    # a cluster worker whose location was not named (``--location``): each task's
    # executor host is reported as where the task is (the heartbeat stat ``taskHosts``)
    task_hosts: bool = False
    # how often ``process_batch`` workers count a batch's records per key bucket (one
    # Spark job; ``process_task`` workers count every batch as they run it), for
    # ``keyBucketCounts`` in the heartbeats (the leader's empty- and hot-bucket
    # signals); 0: never, either API
    bucket_sample_interval_s: float = 30.0
    # a query that dies of anything but the app's own code (``runtime.query_failures``)
    # is started again, at most this many times within ``query_restart_window_s``
    query_restarts: int = 5
    query_restart_window_s: float = 600.0
    # the app's source files as its tracebacks' frames end (``query_failures.app_file``):
    # a failure through them is the app's, and ends the worker
    app_files: tuple[str, ...] = ()
    # every Kafka client's settings beyond the brokers (``--kafka-config``,
    # ``--kafka-option``: security.protocol, SASL, TLS); None: ``kafka_bootstrap`` alone
    kafka_client: KafkaClientSettings | None = None
    # ``process_task`` batches of at most this many records may run in the driver,
    # without a Spark job (``worker.runtime.driver_batches``); 0: every batch in Spark
    driver_batch_records: int = MOST_RECORDS

    @property
    def kafka(self) -> KafkaClientSettings:
        """What every Kafka client of the worker is made with."""
        return self.kafka_client or plain(self.kafka_bootstrap)

    @property
    def task_reads(self) -> KafkaClientSettings | None:
        """The brokers ``process_task``'s runners read a batch's ranges from themselves
        (``worker.runtime.task_reads``), or None: with ``--api batch``, the JVM reader,
        or tasks pinned to a cluster's executors (state on a cluster master), batches
        run on the source's rows."""
        pinned = self.state is not None and not is_local_master(self.spark_master)
        return (self.kafka if self.api == "task" and self.kafka_reader == "python"
                and not pinned else None)


@dataclass(frozen=True)
class BatchContext:
    """What ``process_batch`` gets besides the rows."""

    processor_id: str
    version: int
    batch_id: int
    spark: SparkSession
    task_names: tuple[str, ...] = ()  # this batch's active tasks, in a fixed order
    state_dir: str | None = None  # a stateful worker's state dir
    checkpoint_id: str | None = None  # the id of this batch's state snapshots
    # each task's rows already sit in one Spark partition, and the partitions are as
    # many as the batch can use (``process_task`` then needs no shuffle)
    tasks_placed: bool = False
    # ``process_task`` runs each task's rows a piece at a time and stops where the batch
    # is cut (``worker.cuts``; Kafka input): None runs every task's rows in one call
    cut: CutPlan | None = None
    # a cluster master: each task's state is kept by the executor that runs it
    # (``worker.state.executor``), not on the driver's disk (``state_dir`` is None)
    executor_state: ExecutorStatePlan | None = None
    # exactly-once output: the batch's output (an Arrow table of ``key``, ``value``) is
    # handed here, to be written with the batch's commit, instead of written to Kafka
    collect: Callable[[Any], None] | None = None
    # a pyspark Accumulator the Spark tasks add their rows per task name to
    # (``worker.runtime.bucket_counts.TaskRows``: the key-bucket counts), or None
    task_rows: Any = None
    # the job's key hash: a task's new state store is ordered by it (None: the default)
    key_hash: KeyHash | None = None
    # a Kafka batch whose tasks' runners read its ranges themselves (the DataFrame
    # handed over is then not what ``process_task`` runs on: ``worker.runtime.task_reads``)
    reads: TaskReads | None = None
    # a small batch the driver runs itself, without a Spark job
    # (``worker.runtime.driver_batches``; its runners read it: ``reads`` is set)
    in_driver: bool = False
    # a batch run in Spark whose runners read it: make this process's clients for
    # running batches in the driver meanwhile, and set this once they are
    warm_up_driver: threading.Event | None = None


ProcessBatch = Callable[["DataFrame", BatchContext], None]


@dataclass(frozen=True)
class TaskContext:
    """What ``process_task`` gets besides its rows; ``state`` is the task's per-key state
    (a worker started with ``--stateful``)."""

    processor_id: str
    version: int
    task_name: str
    open_state: Callable[[], TaskStore] = field(default=no_state, repr=False, compare=False)

    @property
    def state(self) -> TaskStore:
        """The task's state: ``get(key, name, default)``, ``set``, ``delete``,
        ``items(key)``, ``get_bytes``/``set_bytes``; every entry under its record key."""
        return self.open_state()


ProcessTask = Callable[[TaskContext, "pd.DataFrame"], "pd.DataFrame | None"]
