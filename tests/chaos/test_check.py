"""The chaos run's independent verdict (``bench.chaos.check``), on written-out outputs:
a record the producer never delivered is not the job's loss, and counts are judged by a
record's place among its key's records in the input."""

from __future__ import annotations

from typing import Any

from bench.chaos.check import check
from bench.chaos.config import ChaosReport


def out(key: str, seq: int, count: int, pid: int = 1, offset: int = 0) -> dict[str, Any]:
    return {"key": key, "seq": seq, "count": count, "pid": pid, "processor": "w0",
            "version": 3, "task": "Partition 0", "partition": 0, "offset": offset,
            "at": float(seq)}


def test_an_input_record_never_delivered_is_neither_lost_nor_counted() -> None:
    report = ChaosReport(final_barrier="done")
    # seq 1 never reached the input topic: seq 2 is the key's second record
    check([out("k", 0, 1), out("k", 2, 2)], {"k": [0, 2]}, set(), report, stateful=True)
    assert (report.produced, report.lost, report.wrong_counts) == (2, 0, 0)
    assert report.ok


def test_a_record_lost_by_the_job_is_named_with_the_records_around_it() -> None:
    report = ChaosReport(final_barrier="done")
    records = [out("k", 0, 1, offset=10), out("k", 2, 2, offset=14)]
    check(records, {"k": [0, 1, 2]}, set(), report, stateful=True)
    assert report.lost == 1 and report.wrong_counts == 1 and not report.ok
    assert report.examples[0].startswith("lost ('k', 1): before it {")
    assert "'offset': 10" in report.examples[0] and "'offset': 14" in report.examples[0]
