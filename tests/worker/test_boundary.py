"""The batch boundary: a change asked for during a batch is applied by that batch as it
ends (published before the next batch is planned); between batches, at once."""

from __future__ import annotations

import threading
import time
from typing import Any, cast

import pytest

from worker.batch_size import BatchSize, start
from worker.plan import EARLIEST, LATEST, QueryPlan, SspStart
from worker.runtime.batches import BatchRunner
from worker.runtime.boundary import BatchBoundary
from worker.runtime.handover import NotAStatefulJob, check_stateful


def until_waiting(boundary: BatchBoundary, n: int) -> None:
    deadline = time.monotonic() + 30
    while boundary.waiting < n:
        assert time.monotonic() < deadline, boundary.waiting
        time.sleep(0.01)


def test_a_change_during_a_batch_is_applied_and_published_as_the_batch_ends() -> None:
    events: list[str] = []
    boundary = BatchBoundary(lambda: events.append("published"))
    in_batch, finish = threading.Event(), threading.Event()
    results: list[object] = []

    def batch() -> None:
        with boundary.batch():
            in_batch.set()
            finish.wait(10)
            events.append("batch ends")
        events.append("next batch planned")  # what Spark does after foreachBatch returns

    runner = threading.Thread(target=batch)
    runner.start()
    in_batch.wait(10)
    def change() -> int:
        events.append("changed")
        return 7

    asker = threading.Thread(target=lambda: results.append(boundary.change(change)))
    asker.start()
    until_waiting(boundary, 1)
    time.sleep(0.1)
    assert events == []  # not while the batch runs
    finish.set()
    runner.join(10)
    asker.join(10)
    assert events == ["batch ends", "changed", "published", "next batch planned"]
    assert results == [7]


def test_a_change_says_it_is_queued_before_it_waits_so_no_batch_misses_it() -> None:
    """The runner cuts the batch in flight once a change is queued, and a batch starting
    looks for queued changes: whichever comes second sees the other."""
    boundary = BatchBoundary(lambda: None)
    seen: list[int] = []
    in_batch, finish = threading.Event(), threading.Event()

    def batch() -> None:
        with boundary.batch():
            in_batch.set()
            finish.wait(10)

    runner = threading.Thread(target=batch)
    runner.start()
    in_batch.wait(10)
    asker = threading.Thread(target=lambda: boundary.change(
        lambda: None, queued=lambda: seen.append(boundary.waiting)))
    asker.start()
    until_waiting(boundary, 1)
    assert seen == [1]  # queued (and told) while the batch still runs
    finish.set()
    runner.join(10)
    asker.join(10)
    assert boundary.waiting == 0


def test_changes_between_batches_apply_at_once_and_many_publish_once_per_batch() -> None:
    published: list[int] = []
    state = {"n": 0}
    boundary = BatchBoundary(lambda: published.append(state["n"]))

    def bump() -> int:
        state["n"] += 1
        return state["n"]

    assert boundary.change(bump) == 1
    assert published == [1]
    in_batch, finish = threading.Event(), threading.Event()

    def batch() -> None:
        with boundary.batch():
            in_batch.set()
            finish.wait(10)

    runner = threading.Thread(target=batch)
    runner.start()
    in_batch.wait(10)
    askers = [threading.Thread(target=boundary.change, args=(bump,)) for _ in range(5)]
    for a in askers:
        a.start()
    until_waiting(boundary, 5)
    finish.set()
    for t in (runner, *askers):
        t.join(10)
    assert state["n"] == 6
    assert published == [1, 6]  # the five applied together as the batch ended


def test_an_offered_change_never_waits_for_the_batch_in_flight() -> None:
    """A retag (nothing waits on it) is applied at once between batches and by the batch
    in flight as it ends, while the thread that offered it goes on (the handover thread
    must be free to run tasks whose restore ended meanwhile)."""
    events: list[str] = []
    boundary = BatchBoundary(lambda: events.append("published"))
    boundary.offer(lambda: events.append("between batches"))
    assert events == ["between batches", "published"]
    in_batch, finish = threading.Event(), threading.Event()

    def batch() -> None:
        with boundary.batch():
            in_batch.set()
            finish.wait(10)
            events.append("batch ends")

    runner = threading.Thread(target=batch)
    runner.start()
    in_batch.wait(10)
    boundary.offer(lambda: events.append("retagged"))  # returns while the batch runs
    assert events == ["between batches", "published"] and boundary.waiting == 1
    finish.set()
    runner.join(10)
    assert events == ["between batches", "published", "batch ends", "retagged", "published"]


def test_a_failing_change_raises_in_the_asking_thread_and_others_still_apply() -> None:
    boundary = BatchBoundary(lambda: None)

    def bad() -> None:
        raise ValueError("no such task")

    with pytest.raises(ValueError, match="no such task"):
        boundary.change(bad)
    assert boundary.change(lambda: "fine") == "fine"


def test_a_failing_batch_still_applies_the_changes_asked_for_meanwhile() -> None:
    boundary = BatchBoundary(lambda: None)
    in_batch = threading.Event()
    results: list[object] = []
    asker = threading.Thread(target=lambda: results.append(boundary.change(lambda: 1)))

    with pytest.raises(RuntimeError), boundary.batch():
        in_batch.set()
        asker.start()
        until_waiting(boundary, 1)
        raise RuntimeError("the user's code failed")
    asker.join(10)
    assert results == [1]


def steered_runner(size: BatchSize, issued: list[int | None]) -> BatchRunner:
    """A runner without Spark or a coordinator, steering its batch size from ``size``
    (each limit it hands the source appended to ``issued``)."""
    return BatchRunner(cast(Any, None), lambda df, ctx: None, cast(Any, None), None,
                       threading.Event(), 60.0, 0.5, lambda: "w1",
                       publish=lambda running: None, size=size, set_limit=issued.append)


def test_the_first_batch_running_gained_tasks_reads_half_the_steered_limit() -> None:
    """Gained tasks first produce output when the first batch running them ends: that
    batch reads half the steered limit, and the next the steered limit again."""
    issued: list[int | None] = []
    runner = steered_runner(start(1.0, 400), issued)
    try:
        assert issued == [400]
        runner.add(QueryPlan(5, 2, (SspStart("Partition 0_0_2", "orders", 0, 0, 100),), ()))
        assert issued == [400, 200]  # (between batches: applied at once)
        runner._steering.after(200, started=10.0, ended=10.5)  # the batch with the gained tasks
        assert issued == [400, 200, 400]
    finally:
        runner.committer.close(0.1)


def test_tasks_of_a_new_job_read_their_backlog_whole_in_their_first_batch() -> None:
    """Tasks without a checkpoint (a new job, starting at the earliest or latest offset)
    had no output before: their first batch is not shortened for it."""
    issued: list[int | None] = []
    runner = steered_runner(start(1.0, 400), issued)
    try:
        runner.add(QueryPlan(1, 2, (SspStart("Partition 0_0_2", "orders", 0, 0, EARLIEST),
                                    SspStart("Partition 0_1_2", "orders", 0, 1, LATEST)), ()))
        assert issued == [400]
        # one of them resuming from a checkpoint (a handover): shortened
        runner.add(QueryPlan(2, 2, (SspStart("Partition 1_0_2", "orders", 1, 0, 7),), ()))
        assert issued == [400, 200]
    finally:
        runner.committer.close(0.1)


def test_a_batch_cut_short_does_not_steer_the_batch_size() -> None:
    """A batch cut short by a change ended early with fewer records processed than it
    read: measured, it would look several times as fast as a full one."""
    issued: list[int | None] = []
    runner = steered_runner(start(1.0, None), issued)
    try:
        runner._steering.after(1000, started=0.0, ended=1.0)
        runner._steering.after(1000, started=1.0, ended=2.0)  # (the first is Spark warming up)
        runner._steering.after(1000, started=2.0, ended=3.0)  # a full batch took the target
        runner._steering.after(0, started=3.0, ended=3.1)  # cut short after 0.1 s
        assert issued == [1000]  # the cut batch moved nothing
        runner._steering.after(1000, started=3.1, ended=4.1)  # (a full one at the target neither)
        assert issued == [1000]
        runner._steering.after(1000, started=4.1, ended=4.6)  # a full one twice as fast does
        assert (issued[-1] or 0) > 1000
    finally:
        runner.committer.close(0.1)


def test_a_stateful_worker_accepts_only_a_stateful_coordinators_checkpoints() -> None:
    """A stateful coordinator names every task's stateSources (``[]``: no state yet);
    checkpoints without them come from one run without ``--stateful``."""
    check_stateful({"A": {"stateSources": []}, "B": {"stateSources": [{"taskName": "A"}]}},
                   {"A", "B"})
    check_stateful({"A": {}}, set())  # nothing about to run
    with pytest.raises(NotAStatefulJob, match=r"of A, B, C, \.\.\.\) name no stateSources"):
        check_stateful({"A": {}, "B": {"inputOffsets": []}, "D": {}}, {"A", "B", "C", "D"})


def test_a_full_batch_steers_the_very_next_one() -> None:
    """A backlog's ramp: a full batch far below the target sizes the next batch as it
    ends (measured a batch later, each step of the ramp cost a batch more)."""
    issued: list[int | None] = []
    runner = steered_runner(start(8.0, None), issued)
    try:
        runner._steering.after(61, started=0.0, ended=2.0)  # (the first is Spark warming up)
        runner._steering.after(1000, started=2.1, ended=2.6)  # full, Spark's part 0.1 s before it
        assert issued == [1000, 8000]  # straight toward 8 s, by at most 8x a step
        runner._steering.after(8000, started=2.7, ended=3.5)
        assert issued[-1] == 64000
    finally:
        runner.committer.close(0.1)
