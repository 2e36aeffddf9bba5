"""Asynchronous commits: the newest commit is always uploaded, in order, one at a time;
a hand-over (flush) returns only once it is acknowledged (pure, with a fake upload)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.client import Fenced
from worker.commits import AsyncCommitter, merge_checkpoints


class Uploads:
    """Records uploads; each waits for its gate when ``gated``."""

    def __init__(self, gated: bool = False, delay_s: float = 0.0) -> None:
        self.done: list[int] = []
        self.gate = threading.Event()
        self.gated = gated
        self.delay_s = delay_s
        self.running = 0
        self.overlapped = False

    def __call__(self, version: int, cps: dict[str, Any], checkpoint_id: str | None,
                 output: tuple[Any, ...] = ()) -> int:
        self.running += 1
        self.overlapped |= self.running > 1
        if self.gated:
            self.gate.wait(10)
        time.sleep(self.delay_s)
        self.done.append(cps["n"])
        self.running -= 1
        return 1


def test_a_commit_deferred_behind_a_slow_upload_is_uploaded_by_flush() -> None:
    # the CI failure: the last batch's commit was skipped behind a slow upload and
    # never sent, so the next owner reprocessed the batch after a graceful hand-over
    uploads = Uploads(gated=True)
    c = AsyncCommitter(uploads, max_delay_s=60)
    c.submit(1, {"n": 1})
    c.submit(1, {"n": 2})  # deferred: 1 is still uploading
    threading.Timer(0.2, uploads.gate.set).start()
    c.flush()
    assert uploads.done == [1, 2]
    c.close()


def test_only_the_newest_deferred_commit_is_uploaded() -> None:
    uploads = Uploads(gated=True)
    c = AsyncCommitter(uploads, max_delay_s=60)
    c.submit(1, {"n": 1})
    for n in (2, 3, 4):
        c.submit(1, {"n": n})
    uploads.gate.set()
    c.flush()
    assert uploads.done == [1, 4]
    assert c.skipped == 2
    c.close()


def test_a_deferred_commit_goes_out_without_a_flush() -> None:
    uploads = Uploads(gated=True)
    c = AsyncCommitter(uploads, max_delay_s=60)
    c.submit(1, {"n": 1})
    c.submit(1, {"n": 2})
    uploads.gate.set()
    deadline = time.monotonic() + 10
    while uploads.done != [1, 2]:
        assert time.monotonic() < deadline, uploads.done
        time.sleep(0.01)
    c.close()


def test_beyond_the_delay_processing_waits_for_the_upload() -> None:
    uploads = Uploads(gated=True)
    c = AsyncCommitter(uploads, max_delay_s=0)
    c.submit(1, {"n": 1})
    threading.Timer(0.2, uploads.gate.set).start()
    c.submit(1, {"n": 2})  # waits for 1, then starts 2
    assert uploads.done[0] == 1
    c.flush()
    assert uploads.done == [1, 2]
    c.close()


def test_a_fenced_upload_surfaces_and_nothing_after_it_is_sent() -> None:
    sent: list[int] = []

    def upload(version: int, cps: dict[str, Any], checkpoint_id: str | None,
                 output: tuple[Any, ...] = ()) -> int:
        time.sleep(0.1)
        if cps["n"] == 1:
            raise Fenced(409, "fenced", "a newer owner")
        sent.append(cps["n"])
        return 1

    c = AsyncCommitter(upload, max_delay_s=60)
    c.submit(1, {"n": 1})
    c.submit(1, {"n": 2})  # deferred behind the upload that will be fenced
    with pytest.raises(Fenced):
        c.flush()
    assert sent == []
    c.close()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=0.004), min_size=1, max_size=12),
       st.floats(min_value=0, max_value=0.004))
def test_uploads_are_serial_ordered_and_end_with_the_newest(
        gaps: list[float], upload_s: float) -> None:
    uploads = Uploads(delay_s=upload_s)
    c = AsyncCommitter(uploads, max_delay_s=60)
    for n, gap in enumerate(gaps):
        c.submit(1, {"n": n})
        time.sleep(gap)
    c.flush()
    c.close()
    assert not uploads.overlapped
    assert uploads.done == sorted(uploads.done)
    assert uploads.done[-1] == len(gaps) - 1
    assert len(uploads.done) + c.skipped == len(gaps)


class Outage:
    """An upload that fails (a blob store down) until ``up`` is set."""

    def __init__(self) -> None:
        self.up = threading.Event()
        self.sent: list[int] = []
        self.attempts = 0

    def __call__(self, version: int, cps: dict[str, Any], checkpoint_id: str | None,
                 output: tuple[Any, ...] = ()) -> int:
        self.attempts += 1
        if not self.up.is_set():
            raise OSError("tcp connect error: connection refused")
        self.sent.append(cps["n"])
        return 1


class BodiesOutage(Outage):
    """An :class:`Outage` that keeps the whole commit bodies it sent (``bodies``)."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, version: int, cps: dict[str, Any], checkpoint_id: str | None,
                 output: tuple[Any, ...] = ()) -> int:
        super().__call__(version, {"n": len(self.bodies)}, checkpoint_id)  # fails until up
        self.bodies.append(cps)
        return 1


def test_a_failed_upload_fails_that_commit_only_and_the_newest_goes_out_after_it() -> None:
    outage = Outage()
    c = AsyncCommitter(outage, max_delay_s=60, retry_base_s=0.01, retry_max_s=0.05)
    c.submit(1, {"n": 1})
    time.sleep(0.2)  # several attempts fail; processing goes on
    for n in (2, 3):
        c.submit(1, {"n": n})
    assert c.flush(timeout_s=0.2) is False  # a hand-over gives up waiting, not the worker
    assert outage.attempts > 2 and c.failures >= 2 and c.last_failure
    outage.up.set()
    assert c.flush(timeout_s=10) is True
    assert outage.sent == [3]  # the newest covers every older one
    assert c.last_failure is None
    c.close()


def test_beyond_the_delay_processing_waits_out_an_outage_without_failing() -> None:
    outage = Outage()
    c = AsyncCommitter(outage, max_delay_s=0.1, retry_base_s=0.01, retry_max_s=0.05)
    c.submit(1, {"n": 1})
    time.sleep(0.15)  # the oldest unacknowledged commit is now past the delay
    threading.Timer(0.3, outage.up.set).start()
    started = time.monotonic()
    c.submit(1, {"n": 2})  # waits until the store is back and a commit went out
    assert time.monotonic() - started >= 0.2
    assert outage.sent and outage.sent[0] in (1, 2)
    c.flush()
    assert outage.sent[-1] == 2
    c.close()


def test_a_refusal_after_an_outage_still_surfaces() -> None:
    calls: list[int] = []

    def upload(version: int, cps: dict[str, Any], checkpoint_id: str | None,
                 output: tuple[Any, ...] = ()) -> int:
        calls.append(cps["n"])
        if len(calls) == 1:
            raise ConnectionError("coordinator unavailable for 90s")
        raise Fenced(409, "fenced", "a newer owner")

    c = AsyncCommitter(upload, max_delay_s=60, retry_base_s=0.01, retry_max_s=0.05)
    c.submit(1, {"n": 1})
    with pytest.raises(Fenced):
        c.flush(timeout_s=10)
    with pytest.raises(Fenced):
        c.submit(1, {"n": 2})
    assert calls == [1, 1]
    c.close()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=40),
       st.lists(st.floats(min_value=0, max_value=0.003), min_size=1, max_size=10))
def test_every_batchs_output_is_uploaded_once_in_order_through_deferrals_and_failures(
        fails: list[bool], gaps: list[float]) -> None:
    """Exactly-once output rides on commits: a commit replacing one not yet written, or
    one whose upload failed (nothing written), carries that one's output before its own."""
    written: list[int] = []
    attempts = iter(fails)

    def upload(version: int, cps: dict[str, Any], checkpoint_id: str | None,
               output: tuple[Any, ...] = ()) -> int:
        if next(attempts, False):
            raise OSError("the broker is down: the transaction aborted")
        written.extend(output)
        return 1

    c = AsyncCommitter(upload, max_delay_s=60, retry_base_s=0.001, retry_max_s=0.002)
    for n, gap in enumerate(gaps):
        c.submit(1, {"n": n}, output=(n,))
        time.sleep(gap)
    assert c.flush(timeout_s=30)
    c.close()
    assert written == list(range(len(gaps)))


def test_tasks_handed_over_without_their_last_commit_are_never_sent_after() -> None:
    """A hand-over that gave up waiting forgets its tasks: the retries of the commit
    carrying them go out without them (the kept tasks still commit), a commit left with
    none is dropped as done, and a later commit of a task that came back carries it."""
    outage = BodiesOutage()
    sent = outage.bodies
    c = AsyncCommitter(outage, max_delay_s=60, retry_base_s=0.01, retry_max_s=0.05)
    c.submit(1, {"lost": 10, "kept": 10})
    assert c.flush(timeout_s=0.1) is False  # the blob store or the coordinator down
    c.forget(["lost"])
    outage.up.set()
    assert c.flush(timeout_s=10) is True
    assert sent == [{"kept": 10}]
    c.submit(1, {"lost": 20})  # it came back to this processor
    assert c.flush(timeout_s=10) is True
    assert sent[-1] == {"lost": 20}
    outage.up.clear()
    c.submit(2, {"gone": 30})
    assert c.flush(timeout_s=0.1) is False
    c.forget(["gone"])
    assert c.flush(timeout_s=10) is True  # nothing left of it: dropped as done
    assert sent[-1] == {"lost": 20}
    c.close()


def body(offsets: dict[str, dict[int, int]]) -> dict[str, Any]:
    """A commit body: task -> {partition: next offset} (Kafka, no key buckets)."""
    return {task: {"inputOffsets": [
        {"ssp": {"system": "kafka", "stream": "in", "partition": p}, "offset": str(o)}
        for p, o in sorted(parts.items())]} for task, parts in offsets.items()}


def flat(cps: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {(task, o["ssp"]["partition"]): int(o["offset"])
            for task, c in cps.items() for o in c["inputOffsets"]}


@given(st.dictionaries(st.sampled_from("abc"), st.dictionaries(
           st.integers(0, 3), st.integers(0, 99), min_size=1), max_size=3),
       st.dictionaries(st.sampled_from("abc"), st.dictionaries(
           st.integers(0, 3), st.integers(0, 99), min_size=1), max_size=3))
def test_a_merged_commit_has_per_task_and_input_the_newest_offset(
        older: dict[str, dict[int, int]], newer: dict[str, dict[int, int]]) -> None:
    merged = flat(merge_checkpoints(body(older), body(newer)))
    expected = {**flat(body(older)), **flat(body(newer))}
    assert merged == expected


def test_a_task_a_cut_left_out_of_the_newer_commit_keeps_the_older_ones_offset() -> None:
    """The loaded chaos run's duplicates under exactly-once output: batches 10-12 of a
    worker committed task P3 to 1439 while the blob store was away; batch 13 was cut
    before P3's first record, so its commit named only P2; it replaced the pending one
    and P3's progress was dropped, while the transaction carried batches 10-12's
    output: P3's next owner processed them again."""
    outage = BodiesOutage()
    sent = outage.bodies
    c = AsyncCommitter(outage, max_delay_s=60, retry_base_s=0.01, retry_max_s=0.05)
    c.submit(11, body({"P2": {2: 1752}, "P3": {3: 1362}}), output=(10,))
    assert c.flush(timeout_s=0.1) is False  # failing: backing off
    c.submit(11, body({"P2": {2: 1858}, "P3": {3: 1439}}), output=(11, 12))
    c.submit(11, body({"P2": {2: 1885}}), output=(13,))  # P3 cut before its records
    outage.up.set()
    assert c.flush(timeout_s=10) is True
    assert flat(sent[-1]) == {("P2", 2): 1885, ("P3", 3): 1439}
    c.close()


def test_a_task_forgotten_before_the_newer_commit_is_not_carried_into_it() -> None:
    outage = BodiesOutage()
    sent = outage.bodies
    c = AsyncCommitter(outage, max_delay_s=60, retry_base_s=0.01, retry_max_s=0.05)
    c.submit(1, body({"kept": {0: 10}, "lost": {1: 10}}))
    assert c.flush(timeout_s=0.1) is False
    c.forget(["lost"])  # handed over without its last commit
    c.submit(1, body({"kept": {0: 20}}))
    outage.up.set()
    assert c.flush(timeout_s=10) is True
    assert flat(sent[-1]) == {("kept", 0): 20}
    c.close()
