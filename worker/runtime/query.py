"""The worker's one Structured Streaming query, for its whole life: fed by a Coxswain
source (``worker.sources.kafka``, ``worker.sources.kinesis``) that plans every micro-batch
from the source plan this module writes whenever the running tasks change. It starts
once the first tasks are known (they say the input system and, for Kinesis, the stream),
or before them with a worker's first standby copies, and is never restarted for a
handover."""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from worker.running import Running
from worker.runtime.contexts import WorkerConfig
from worker.sources.kafka import kafka_stream
from worker.sources.kinesis import NAME as KINESIS
from worker.sources.kinesis import KinesisDataSource
from worker.sources.pacing import poll_interval
from worker.sources.source_plan import SourcePlan, write_plan

log = logging.getLogger("coxswain.worker")


OnBatch = Callable[[DataFrame, int], None]


class SourceQuery:
    """The query, and the source plan file it reads."""

    def __init__(self, spark: SparkSession, config: WorkerConfig, on_batch: OnBatch
                 ) -> None:
        self._spark = spark
        self._config = config
        self._on_batch = on_batch
        # a folder of its own is removed at the end; one the user named is kept
        self._owned = config.checkpoint_root is None
        self._root = config.checkpoint_root or Path(tempfile.mkdtemp(prefix="coxswain-"))
        self._root.mkdir(parents=True, exist_ok=True)
        self._plan_path = self._root / "source-plan.json"
        self._query: Any = None
        self._folder: Path | None = None  # the query's checkpoint location
        self._reads: tuple[str, str | None] | None = None  # (system, Kinesis stream)
        # the plan file is written from the control thread (tasks change) and the batch
        # thread (the batch size changes): each write has the latest of both
        self._write_lock = threading.Lock()
        self._source = SourcePlan()
        self._max_records: int | None = None
        self._failed: str | None = None  # why the query did not start (until forgotten)
        # started by warm() for standby copies, no task run in it yet: tasks reading
        # another input replace it
        self._warming = False

    @property
    def cut_folder(self) -> Path:
        """Where the driver signals its executors to cut a batch short on a local master
        (``worker.cut_signals``: its executors share its disk)."""
        return self._root / "cuts"

    @property
    def query(self) -> Any:
        """The running StreamingQuery (None before the first tasks or standby copies)."""
        return self._query

    def apply(self, running: Running) -> None:
        """Make the source read what ``running`` says from its next batch on (starting
        the query with the first tasks)."""
        with self._write_lock:
            self._source = running.source
            self._write()
        plan = running.plan
        if not plan.starts:
            return
        stream = plan.starts[0].topic if plan.system == "kinesis" else None
        reads = (plan.system, stream)
        if self._query is not None and reads != self._reads:
            if not self._warming:
                raise ValueError(f"a worker's query reads one input system and one Kinesis "
                                 f"stream: {self._reads} for its life, now {reads}")
            # started by :meth:`warm` on a standby copy's input, which is not the tasks'
            # (a job of several inputs); no task ran in it: theirs is a new one
            log.info("the query started for standby copies reads %s; the tasks read %s: "
                     "a new query", self._reads, reads)
            self.forget()
        self._warming = False
        self._start_once(reads)

    def warm(self, system: str, stream: str | None) -> None:
        """Start the query before its first tasks, reading nothing yet: a worker that
        holds only standby copies (warm-ups of tasks moving to it, KIP-441) then has its
        query and the source's planner running when the tasks arrive, instead of
        starting them in the moved tasks' pause (2-5 s on a 2-core host). ``system`` and
        ``stream`` are the copies' (a Kinesis query reads one stream for its life); tasks
        that read another get a query of their own (:meth:`apply`)."""
        if self._query is not None:
            return
        with self._write_lock:
            self._write()  # the plan the source reads: nothing, until tasks come
        self._start_once((system, stream if system == "kinesis" else None))
        self._warming = self._query is not None

    def _start_once(self, reads: tuple[str, str | None]) -> None:
        """Start the query reading ``reads`` unless it runs, or died at its start (then
        nothing starts until it is forgotten)."""
        if self._query is not None or self._failed is not None:
            return
        try:
            self._start(reads)
        except Exception as e:  # (Spark's Python workers, py4j): a query dead at start
            self._failed = f"the query did not start: {_text(e)}"
            log.warning("%s", self._failed)

    def limit(self, records: int | None) -> None:
        """Read at most ``records`` per batch from the next on (None: no limit beyond
        the source's own)."""
        with self._write_lock:
            if records != self._max_records:
                self._max_records = records
                self._write()

    def _write(self) -> None:
        write_plan(self._plan_path, replace(self._source, max_records=self._max_records))

    def batch_offsets(self, batch_id: int) -> dict[str, Any] | None:
        """The source's end offsets of batch ``batch_id``, from the query's offset log
        (Spark writes a batch's entry before it runs the batch); None when unreadable."""
        if self._folder is None:
            return None
        try:
            lines = (self._folder / "offsets" / str(batch_id)).read_text().splitlines()
            found = json.loads(lines[2])  # the version, the batch's metadata, our source
        except (OSError, IndexError, ValueError) as e:
            log.warning("batch %d: its offsets are not readable (%s)", batch_id, e)
            return None
        return found if isinstance(found, dict) else None

    @property
    def _tick_ms(self) -> int:
        return max(1, int(poll_interval(self._config.trigger_interval_s) * 1000))

    def _start(self, reads: tuple[str, str | None]) -> None:
        system, stream = reads
        folder = self._root / f"query-{uuid.uuid4().hex[:8]}"
        self._folder = folder
        query = (self._reader(system, stream).writeStream
                 .foreachBatch(self._on_batch)
                 .option("checkpointLocation", str(folder))
                 # the source paces itself (once a trigger interval, at once for
                 # tasks just added): the query's own trigger only ticks
                 .trigger(processingTime=f"{self._tick_ms} milliseconds")
                 .start())
        self._query, self._reads = query, reads
        log.info("query %s started: %s%s, source plan %s", query.id, system,
                 f" stream {stream}" if stream else "", self._plan_path)

    def _reader(self, system: str, stream: str | None) -> DataFrame:
        c = self._config
        if system == "kinesis":
            self._spark.dataSource.register(KinesisDataSource)
            return (self._spark.readStream.format(KINESIS)
                    .option("stream", stream or "")
                    .option("endpoint", c.kinesis_endpoint or "")
                    .option("region", c.kinesis_region or "")
                    .option("plan", str(self._plan_path))
                    .option("maxRecordsPerShard", str(c.max_offsets_per_trigger or 10_000))
                    .option("batchGapMs", str(int(c.trigger_interval_s * 1000)))
                    .load())
        df: DataFrame = kafka_stream(self._spark, self._plan_path, c.kafka,
                                     c.max_offsets_per_trigger, c.trigger_interval_s)
        return df

    def failure(self) -> str | None:
        """Why the query died (its exception, tracebacks included), or None while it
        runs (and before it starts)."""
        if self._failed is not None:
            return self._failed
        if self._query is None or self._query.isActive:
            return None
        return _text(self._query.exception() or "the query stopped without an exception")

    def forget(self) -> None:
        """Drop a dead query: the next :meth:`apply` with tasks starts a new one, in a
        checkpoint folder of its own (the source plan file stays where it is)."""
        if self._query is not None:
            with contextlib.suppress(Exception):  # dead already: whatever stop() says
                self._query.stop()
        folder, self._folder = self._folder, None
        self._query = self._reads = self._failed = None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def progress(self) -> dict[str, Any] | None:
        """The query's last progress (None before its first)."""
        if self._query is None:
            return None
        found: dict[str, Any] | None = self._query.lastProgress
        return found

    def stop(self) -> None:
        """Stop the query (after the batch in flight)."""
        if self._query is not None:
            self._query.stop()
            log.info("query %s stopped", self._query.id)
        if self._owned:
            shutil.rmtree(self._root, ignore_errors=True)


def _text(error: object) -> str:
    """``error`` as text (a py4j error's own str() fails once the JVM is gone)."""
    try:
        return str(error)
    except Exception:
        return type(error).__name__

