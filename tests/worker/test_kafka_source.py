"""The Kafka source's executor side on a real broker: ranges read exactly, consumers kept
between batches of a partition, and a range read after a consumer went past it."""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from service.local.kafka import LocalKafka
from service.local.orders import create_topics
from worker.sources.kafka import KafkaRange, _budget, _groups, batch_limit, read_range
from worker.sources.kafka_consumers import ConsumerPool


def _offsets(batches: list[Any]) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


def _values(batches: list[Any]) -> list[bytes]:
    return [v for b in batches for v in b.column("value").to_pylist()]


def _topic(kafka: LocalKafka) -> str:
    topic = f"src-{uuid.uuid4().hex[:8]}"
    create_topics(kafka.bootstrap, [(topic, 1)])
    return topic


def test_consecutive_ranges_share_one_consumer_and_read_exactly(kafka: LocalKafka) -> None:
    topic = _topic(kafka)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "log_level": 2})
    for i in range(300):
        p.produce(topic, key=b"k", value=str(i).encode())
    p.flush()
    consumers = ConsumerPool()
    try:
        got: list[int] = []
        for start, end in ((0, 100), (100, 180), (180, 300)):
            got += _offsets(list(read_range(kafka.bootstrap,
                                            KafkaRange(topic, 0, start, end, 1), consumers)))
        assert got == list(range(300))
        assert consumers.created == 1  # later batches found it where the last ended
        # a partition read again from an earlier offset (a new generation)
        again = list(read_range(kafka.bootstrap, KafkaRange(topic, 0, 50, 60, 2), consumers))
        assert _offsets(again) == list(range(50, 60))
        assert _values(again) == [str(i).encode() for i in range(50, 60)]
        assert consumers.created == 1
        # and on from there, without a gap
        assert _offsets(list(read_range(kafka.bootstrap, KafkaRange(topic, 0, 60, 70, 2),
                                        consumers))) == list(range(60, 70))
    finally:
        consumers.close()


def test_transaction_markers_and_aborted_records_inside_and_between_ranges(
        kafka: LocalKafka) -> None:
    """A read-committed range skips aborted records and markers; a range ending on a
    marker leaves the kept consumer past it, and the next range still starts right."""
    topic = _topic(kafka)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": uuid.uuid4().hex,
                  "log_level": 2})
    p.init_transactions()
    committed: list[bytes] = []
    for t in range(6):
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, key=b"k", value=f"{t}-{i}".encode())
        if t % 3 == 1:
            p.flush()  # written, then aborted (unsent records would just be purged)
            p.abort_transaction()
        else:
            p.commit_transaction()
            committed += [f"{t}-{i}".encode() for i in range(5)]
    end = 6 * 6  # five records and one marker per transaction
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "probe", "log_level": 2})
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, end)
    c.close()
    consumers = ConsumerPool()
    try:
        got: list[bytes] = []
        # ranges that end on markers and inside aborted transactions
        for start, stop in ((0, 5), (5, 6), (6, 14), (14, 20), (20, end)):
            got += _values(list(read_range(kafka.bootstrap,
                                           KafkaRange(topic, 0, start, stop, 1), consumers)))
        assert got == committed
        assert consumers.created == 1
    finally:
        consumers.close()


def test_a_failed_read_does_not_keep_its_consumer(kafka: LocalKafka) -> None:
    topic = _topic(kafka)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "log_level": 2})
    for i in range(20):
        p.produce(topic, value=str(i).encode())
    p.flush()
    consumers = ConsumerPool()
    try:
        reading = read_range(kafka.bootstrap, KafkaRange(topic, 0, 0, 20, 1), consumers)
        next(reading)
        reading.close()  # Spark gave up on the task mid-range
        assert _offsets(list(read_range(kafka.bootstrap, KafkaRange(topic, 0, 0, 20, 1),
                                        consumers))) == list(range(20))
        assert consumers.created == 2
    finally:
        consumers.close()


def test_a_batch_is_read_by_at_most_one_spark_task_per_core_the_biggest_ranges_spread(
) -> None:
    ranges = [KafkaRange("t", p, 0, n) for p, n in enumerate([500, 10, 300, 250, 40])]
    for readers in (1, 2, 3, 8):
        reads = _groups(ranges, readers)
        assert len(reads) == min(readers, len(ranges))
        assert sorted(r.partition for read in reads for r in read.ranges) == list(range(5))
    two = _groups(ranges, 2)
    loads = sorted(sum(r.end - r.start for r in read.ranges) for read in two)
    assert loads == [550, 550]  # 500 + 40 + 10 against 300 + 250


def test_a_backlog_a_little_over_the_steered_limit_is_read_in_one_batch() -> None:
    """A few records left over would be a batch of their own (a whole batch's fixed cost
    for them): within a tenth over the steered limit the batch reads them too, never
    over the user's ceiling; further over, the steered limit holds."""
    assert batch_limit(100_002, None, 100_000) == 100_002
    assert batch_limit(110_000, None, 100_000) == 110_000
    assert batch_limit(110_001, None, 100_000) == 100_000
    assert batch_limit(100_002, 100_001, 100_000) == 100_001  # the user's ceiling
    assert batch_limit(50, None, 100_000) == 100_000
    assert batch_limit(5, 3, None) == 3
    assert batch_limit(5, None, None) is None
    assert batch_limit(1, None, 1) == 1
    # what the source then reads per partition: all of it
    limit = batch_limit(100_002, None, 100_000)
    assert sum(_budget({"t/0": 50_001, "t/1": 50_001}, limit).values()) == 100_002


def test_the_planner_looks_once_a_gap_and_at_once_for_tasks_added(
        kafka: LocalKafka, tmp_path: Any) -> None:
    """``worker.sources.pacing`` on the real planner: a record produced within the gap
    waits for it, as does a plan that only drops a partition; one that adds (tasks
    gained) is planned at the next tick."""
    import time

    from worker.sources.kafka import KafkaStreamReader
    from worker.sources.source_plan import PartitionStart, SourcePlan, write_plan

    topic = _topic(kafka)
    p = Producer({"bootstrap.servers": kafka.bootstrap, "log_level": 2})
    p.produce(topic, key=b"k", value=b"0")
    p.flush()
    plan = tmp_path / "plan.json"
    key = f"{topic}/0"
    write_plan(plan, SourcePlan(1, {key: PartitionStart("0")}))
    reader = KafkaStreamReader({"plan": str(plan), "bootstrap": kafka.bootstrap,
                                "batchGapMs": "3000"})
    first = reader.latestOffset(reader.initialOffset())
    assert first["p"][key]["to"] == 1
    p.produce(topic, key=b"k", value=b"1")
    p.flush()
    assert reader.latestOffset(first) is first  # within the gap: not looked at
    write_plan(plan, SourcePlan(2, {}))  # its task lost: nothing to read at once
    assert reader.latestOffset(first) is first
    write_plan(plan, SourcePlan(3, {key: PartitionStart("1", 1)}))  # a task gained
    changed = reader.latestOffset(first)
    assert changed["v"] == 3 and changed["p"][key] == {"from": 1, "to": 2, "g": 1}
    p.produce(topic, key=b"k", value=b"2")
    p.flush()
    started = time.monotonic()
    later = reader.latestOffset(changed)
    while later is changed and time.monotonic() - started < 10:
        time.sleep(0.1)
        later = reader.latestOffset(changed)
    assert later["p"][key]["to"] == 3
    assert time.monotonic() - started >= 2.5  # the gap since the last look
