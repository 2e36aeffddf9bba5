"""Pinning a stateful worker's tasks to executors on a cluster master: each task runs on
the same executor from batch to batch while that executor lives, so its state stays
where it is (``worker.state.executor``: a task that moves restores from the blob store).

Spark places a partition of an RDD on the executor that cached it (``PROCESS_LOCAL``),
and a narrow child partition inherits that preference. A small *placement RDD* of
``slots`` partitions (one number each), persisted once, so pins every narrow child: a
batch of a pinned worker is a job over it, whose partition ``i`` reads the Kafka ranges
that slot ``i``'s tasks need (the source's executor-side reader, given the batch's
planned ranges) and runs those tasks (docs/architecture.md, "Pinning a task to an
executor"). The driver keeps task -> slot, sticky and balanced
(:func:`assign_slots`).

- An executor lost: Spark computes its placement partitions again on live executors, at
  once (their cache locations went with it), and caches them there: its tasks restore
  there once, then stay.
- An executor added: cached partitions never move by themselves, so a new placement RDD
  (over every executor's cores) is made; tasks then land where its partitions are
  cached, and those that moved restore once. An executor counts as covered only once it
  holds a slot: one whose block manager registered before it took tasks (it was still
  fetching the application's jars) saw the caching job run on the others, and would stay
  idle for good; the next batches make the placement RDD again for it, a few times at
  most (:data:`TRIES_PER_EXECUTOR`).
- What it costs: a slot reads every Kafka partition its tasks have buckets of, so two
  slots holding buckets of one partition both read it (reading is cheap next to a
  restore).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession

from common.kafka_clients import Brokers
from worker.plan import sql_string
from worker.sources.jvm_kafka import planned_ranges
from worker.sources.kafka import SCHEMA, KafkaRange, read_range

log = logging.getLogger("coxswain.worker")

T = TypeVar("T")
R = TypeVar("R")

#: placement partitions per executor core: one, so the job that caches the placement RDD
#: (one partition per core, all free) puts as many on each executor as it has cores, and
#: a batch's pinned Spark tasks never queue for a busy core of their executor while
#: another idles (past ``spark.locality.wait`` Spark would run them elsewhere)
SLOTS_PER_CORE = 1
#: the column naming the slot that read a row
SLOT = "_slot"
#: placement RDDs made for an executor that then held no slot of them, before it is left
#: idle (each may move tasks, which then restore: a bound, not a loop); the n-th comes
#: 2^(n-2) s after the one before it at the earliest, so the tries span some 15 s of an
#: executor's start (its jars fetched from the driver on a busy host)
TRIES_PER_EXECUTOR = 5
#: seconds each partition of the caching job holds its core: a single free core cannot
#: take every partition one after the other before the other executors' offers arrive
HOLD_S = 0.3


def assign_slots(previous: Mapping[str, int], tasks: Sequence[str], slots: int
                 ) -> dict[str, int]:
    """Each of ``tasks`` on one of ``slots`` slots, loads differing by one at most: a
    task keeps its previous slot (its state is there) unless that slot is gone or holds
    more than its share; new tasks and moved ones go to the least-loaded slots."""
    slots = max(1, slots)
    names = sorted(set(tasks))
    share, extra = divmod(len(names), slots)  # ``extra`` slots may hold share + 1
    kept: dict[int, list[str]] = {}
    moving: list[str] = []
    for name in names:
        slot = previous.get(name)
        if slot is not None and 0 <= slot < slots:
            kept.setdefault(slot, []).append(name)
        else:
            moving.append(name)
    assigned: dict[str, int] = {}
    loads = [0] * slots
    bigger = 0  # slots holding share + 1 so far
    for slot in sorted(kept, key=lambda s: (-len(kept[s]), s)):  # the fullest first
        cap = share + 1 if bigger < extra else share
        stay = kept[slot][:cap]
        moving += kept[slot][cap:]
        for name in stay:
            assigned[name] = slot
        loads[slot] = len(stay)
        bigger += len(stay) == share + 1
    for name in sorted(moving):
        slot = min(range(slots), key=lambda s: (loads[s], s))
        assigned[name] = slot
        loads[slot] += 1
    return assigned


def slot_ranges(ranges: Mapping[str, Any], partitions_of: Mapping[int, set[tuple[str, int]]]
                ) -> dict[int, list[KafkaRange]]:
    """Per slot, the batch's planned ranges (the offset log's ``"topic/p": {"from",
    "to", "g"}``) of the Kafka partitions its tasks read, those with records."""
    found: dict[int, list[KafkaRange]] = {}
    for (topic, partition), (start, end, gen) in sorted(planned_ranges({"p": ranges}).items()):
        for slot, wanted in partitions_of.items():
            if (topic, partition) in wanted:
                found.setdefault(slot, []).append(KafkaRange(topic, partition, start, end, gen))
    return found


def slot_sql(slots: Mapping[str, int]) -> str:
    """Spark SQL: the slot of each row's task (``taskName``)."""
    if not slots:
        return "-1"
    return "CASE taskName " + " ".join(
        f"WHEN {sql_string(t)} THEN {s}" for t, s in sorted(slots.items())) + " ELSE -1 END"


def executors(spark: SparkSession) -> frozenset[str]:
    """host:port of every block manager of the application (the driver's included)."""
    infos: Any = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return frozenset(f"{i.host()}:{i.port()}" for i in infos)


def holders(spark: SparkSession, rdd_id: int, partitions: int) -> frozenset[str]:
    """host:port of the block managers holding a cached partition of RDD ``rdd_id``,
    and the driver's (which never runs a slot on a cluster, and is every slot's
    executor on a local master)."""
    jvm: Any = spark.sparkContext._jvm
    env: Any = spark.sparkContext._jsc.sc().env()
    master = env.blockManager().master()
    own = env.blockManager().blockManagerId()
    found = {f"{own.host()}:{own.port()}"}
    for i in range(partitions):
        locations = master.getLocations(jvm.org.apache.spark.storage.RDDBlockId(rdd_id, i))
        for j in range(locations.size()):
            where = locations.apply(j)
            found.add(f"{where.host()}:{where.port()}")
    return frozenset(found)


def uncovered_to_retry(now: frozenset[str], covered: frozenset[str],
                       tries: Mapping[str, tuple[int, float]], at: float,
                       limit: int = TRIES_PER_EXECUTOR) -> frozenset[str]:
    """The executors of ``now`` that hold no slot and are due another placement RDD at
    time ``at``: tried (``tries``: executor -> (count, time of the last)) fewer than
    ``limit`` times, the last at least 2^(count-1) s ago."""
    def due(executor: str) -> bool:
        count, last = tries.get(executor, (0, 0.0))
        return count == 0 or (count < limit and at - last >= 2.0 ** (count - 1))
    return frozenset(e for e in now - covered if due(e))


def _held(i: int) -> int:
    time.sleep(HOLD_S)
    return i


class Placement:
    """The placement RDD of one application and the slot of every task."""

    def __init__(self, spark: SparkSession, bootstrap: Brokers,
                 slots_per_core: int = SLOTS_PER_CORE) -> None:
        self._spark = spark
        self._bootstrap = bootstrap
        self._per_core = slots_per_core
        self._anchor: Any = None  # the persisted placement RDD
        # the block managers holding a slot of it (and the driver's)
        self._members: frozenset[str] = frozenset()
        # executor -> (placement RDDs that left it without a slot, when the last was made)
        self._tries: dict[str, tuple[int, float]] = {}
        self._slots: dict[str, int] = {}  # running tasks
        self._copies: dict[str, int] = {}  # standby and warm-up copies this worker keeps
        # a batch (the batch thread) and a standby refresh (the control thread) both
        # place tasks; a new placement RDD is made by whichever comes first
        self._lock = threading.Lock()
        self.made = 0  # placement RDDs made so far

    def _refreshed(self) -> Any:
        """The placement RDD, made again when executors were added since the last, or
        one of them got no slot of it (the caller holds the lock)."""
        now = executors(self._spark)
        if self._anchor is not None and not uncovered_to_retry(
                now, self._members, self._tries, time.monotonic()):
            return self._anchor
        sc = self._spark.sparkContext
        slots = max(1, self._per_core * sc.defaultParallelism)
        old = self._anchor
        anchor = sc.parallelize(list(range(slots)), slots).map(_held).persist()
        anchor.count()  # cached now, one partition per free core: spread over executors
        if old is not None:
            old.unpersist()
        try:
            held = holders(self._spark, anchor.id(), slots)
        except Exception as e:  # (Spark internals: never fail a batch over a hint)
            log.warning("where the placement RDD's slots are cached is unknown (%s): "
                        "every executor counted as holding one", e)
            held = now
        idle = now - held
        made_at = time.monotonic()
        for executor in idle:
            self._tries[executor] = (self._tries.get(executor, (0, 0.0))[0] + 1, made_at)
        self._anchor, self._members = anchor, held
        self.made += 1
        log.info("placement RDD %d: %d slots over %d block managers", self.made, slots,
                 len(now))
        for executor in sorted(idle):
            tries = self._tries[executor][0]
            if tries < TRIES_PER_EXECUTOR:
                log.info("executor %s got no slot (it was not taking tasks yet): placed "
                         "again in %.0fs at the earliest (try %d of %d)", executor,
                         2.0 ** (tries - 1), tries, TRIES_PER_EXECUTOR)
            else:
                log.warning("executor %s got no slot in %d placement RDDs: it stays idle "
                            "until one is made for an added executor", executor, tries)
        return anchor

    def rows(self, ranges: Mapping[str, Any], partitions: Mapping[str, set[tuple[str, int]]]
             ) -> tuple[DataFrame, dict[str, int]]:
        """The batch's rows for ``partitions`` (task -> the Kafka partitions it reads),
        each read by the slot of its task's executor (column ``_slot``), and the slots.
        Rows a slot read for another slot's task are the caller's to drop (keep rows
        whose task's :func:`slot_sql` is ``_slot``)."""
        with self._lock:
            anchor = self._refreshed()
            count = anchor.getNumPartitions()
            # a task keeps the slot of its standby copy, where its state was fetched to
            self._slots = assign_slots({**self._copies, **self._slots}, list(partitions),
                                       count)
            placed = dict(self._slots)
        wanted: dict[int, set[tuple[str, int]]] = {}
        for task, slot in placed.items():
            wanted.setdefault(slot, set()).update(partitions[task])
        by_slot = slot_ranges(ranges, wanted)
        bootstrap = self._bootstrap

        def read(batches: Iterator[Any]) -> Iterator[Any]:
            import pyarrow as pa  # type: ignore[import-untyped]  # noqa: PLC0415 (executor)

            for batch in batches:
                for slot in batch.column(0).to_pylist():
                    for r in by_slot.get(int(slot), ()):
                        for got in read_range(bootstrap, r):
                            yield got.append_column(
                                SLOT, pa.array([int(slot)] * got.num_rows, pa.int32()))

        slots = self._spark.createDataFrame(anchor.map(lambda i: (i,)), f"{SLOT} int")
        return slots.mapInArrow(read, f"{SCHEMA}, {SLOT} int"), placed

    def run(self, items: Mapping[str, T], fn: Callable[[Iterable[tuple[str, T]]],
                                                        Iterable[R]]) -> list[R]:
        """``fn`` over the items of standby copies, each task's on the executor of its
        slot (kept for the copy until it runs: :meth:`rows` starts it there)."""
        with self._lock:
            anchor = self._refreshed()
            self._copies = assign_slots(self._copies, list(items), anchor.getNumPartitions())
            by_slot: dict[int, list[tuple[str, T]]] = {}
            for task, slot in self._copies.items():
                by_slot.setdefault(slot, []).append((task, items[task]))

        def run_slot(slot: int, _: Iterable[int]) -> Iterable[R]:
            return fn(by_slot.get(slot, []))

        found: list[R] = anchor.mapPartitionsWithIndex(run_slot).collect()
        return found
