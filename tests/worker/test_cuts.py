"""Cutting a batch short (``worker.cuts``), the executor's side (pure: pandas, files):
``process_task`` gets a task's rows a piece at a time, in order, and stops where the
driver's signal appears; what each task left is reported from its first record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from worker.cut_signals import signal_path
from worker.cuts import (
    CutPlan,
    CutReports,
    of_batch,
    piece_bounds,
    pieces_for,
    processed_records,
)
from worker.runtime.bucket_counts import TaskRows
from worker.runtime.contexts import TaskContext
from worker.runtime.task_api import _partition_runner


@given(st.integers(0, 5000), st.integers(1, 64), st.integers(1, 100))
def test_pieces_cover_every_row_once_in_order(rows: int, pieces: int, minimum: int) -> None:
    bounds = piece_bounds(rows, pieces, minimum)
    assert [i for a, b in bounds for i in range(a, b)] == list(range(rows))
    assert len(bounds) <= max(1, pieces)
    assert all(b - a >= minimum for a, b in bounds[:-1])


def test_reports_keep_the_lowest_offset_and_belong_to_their_batch() -> None:
    merged = CutReports().addInPlace({(1, "A", "t", 0): 9}, {(1, "A", "t", 0): 7,
                                                            (2, "B", "t", 1): 3})
    assert merged == {(1, "A", "t", 0): 7, (2, "B", "t", 1): 3}
    assert of_batch(merged, 1) == {("A", "t", 0): 7}
    assert pieces_for(4.0) == 16 and pieces_for(0.01) == 1


class Collected:
    """What a Spark accumulator does in an executor: ``add``."""

    def __init__(self) -> None:
        self.value: dict[Any, int] = {}

    def add(self, update: dict[Any, int]) -> None:
        self.value = CutReports().addInPlace(self.value, update)


def rows_of(task: str, partition: int, offsets: list[int]) -> pd.DataFrame:
    return pd.DataFrame({"key": [b"k"] * len(offsets), "value": [b"v"] * len(offsets),
                         "topic": ["orders"] * len(offsets),
                         "partition": [partition] * len(offsets), "offset": offsets,
                         "taskName": [task] * len(offsets)})


def test_a_cut_stops_the_task_in_work_before_its_next_piece_and_the_next_tasks(
    tmp_path: Path,
) -> None:
    reports = Collected()
    cut = CutPlan(str(tmp_path), 7, 2, reports)
    calls: list[tuple[str, list[int]]] = []

    def fn(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
        calls.append((ctx.task_name, list(rows["offset"])))
        if len(calls) == 3:  # the driver cuts the batch while A's second piece runs
            signal_path(tmp_path, 7).touch()
        return pd.DataFrame({"key": rows["key"], "value": rows["value"]})

    frames = [rows_of("A", 0, list(range(0, 200, 2))), rows_of("B", 1, list(range(60))),
              rows_of("C", 2, [5, 9])]
    # (shuffled: each task's rows are put in offset order)
    batch = pd.concat(frames).sample(frac=1, random_state=3)
    out = list(_partition_runner(fn, "w1", 3, cut=cut)(iter([batch])))
    # A: 100 rows in 2 pieces of 50 (at least 32 each); B: 60 in 2 of 32 and 28
    assert calls == [("A", list(range(0, 100, 2))), ("A", list(range(100, 200, 2))),
                     ("B", list(range(32)))]
    assert sum(len(o) for o in out) == 50 + 50 + 32
    assert reports.value == {(7, "B", "orders", 1): 32, (7, "C", "orders", 2): 5}


class Rows:
    """The key-bucket counts' accumulator (``TaskRows``) in an executor: ``add``."""

    def __init__(self) -> None:
        self.value: dict[str, int] = {}

    def add(self, update: dict[str, int]) -> None:
        self.value = TaskRows().addInPlace(self.value, update)


def test_a_cut_batch_counts_the_rows_its_tasks_ran_not_those_left_to_the_next(
    tmp_path: Path,
) -> None:
    """The key-bucket counts take the rows each task processed: the rows a cut leaves
    are read again by the next batch and counted then (counted in both, a bucket whose
    task was cut would look hot: the loaded suite's false hot bucket)."""
    cut = CutPlan(str(tmp_path), 7, 2, Collected())
    rows = Rows()
    calls = 0

    def fn(ctx: TaskContext, rows: pd.DataFrame) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:  # cut while B's first piece runs
            signal_path(tmp_path, 7).touch()

    batch = pd.concat([rows_of("A", 0, list(range(100))), rows_of("B", 1, list(range(60))),
                       rows_of("C", 2, [5, 9])])
    list(_partition_runner(fn, "w1", 3, cut=cut, rows_counted=rows)(iter([batch])))
    assert rows.value == {"A": 100, "B": 32}
    uncut = Rows()
    list(_partition_runner(fn, "w1", 3, rows_counted=uncut)(iter([batch])))
    assert uncut.value == {"A": 100, "B": 60, "C": 2}


def test_a_batch_cut_before_it_starts_still_runs_one_piece(tmp_path: Path) -> None:
    reports = Collected()
    signal_path(tmp_path, 1).touch()
    seen: list[int] = []

    def fn(ctx: TaskContext, rows: pd.DataFrame) -> None:
        seen.extend(rows["offset"])

    list(_partition_runner(fn, "w1", 3, cut=CutPlan(str(tmp_path), 1, 4, reports))(
        iter([rows_of("A", 0, list(range(200)))])))
    assert seen == list(range(50))
    assert reports.value == {(1, "A", "orders", 0): 50}


def test_without_a_cut_plan_each_task_is_one_call(tmp_path: Path) -> None:
    calls: list[int] = []
    signal_path(tmp_path, 1).touch()  # (nobody looks)

    def fn(ctx: TaskContext, rows: pd.DataFrame) -> None:
        calls.append(len(rows))

    list(_partition_runner(fn, "w1", 3)(iter([rows_of("A", 0, list(range(200)))])))
    assert calls == [200]


def test_a_stateful_task_cut_short_snapshots_the_state_of_what_it_processed(
    tmp_path: Path,
) -> None:
    """The pieces of a task share one store session (each sees the writes before it);
    the batch's snapshot pairs with the offsets the task reports it left."""
    from worker.state.snapshot import snapshot_dir
    from worker.state.store import TaskStore

    reports = Collected()
    state = tmp_path / "state"
    cut = CutPlan(str(tmp_path), 2, 3, reports)

    def count(ctx: TaskContext, rows: pd.DataFrame) -> None:
        for key in rows["key"]:
            ctx.state.set(key, "n", ctx.state.get(key, "n", 0) + 1)
        signal_path(tmp_path, 2).touch()  # cut as the first piece ends

    list(_partition_runner(count, "w1", 3, str(state), "1000-1", cut)(
        iter([rows_of("A", 0, list(range(120)))])))
    assert reports.value == {(2, "A", "orders", 0): 40}
    with TaskStore(snapshot_dir(state, "A", "1000-1")) as snap:
        assert snap.get(b"k", "n") == 40


@given(st.dictionaries(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3)),
                       st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)),
                       max_size=6),
       st.integers(1, 4), st.data())
def test_a_cut_batchs_processed_records_are_its_tasks_shares_of_their_ranges(
        ranges: dict[tuple[str, int], tuple[int, int]], factor: int, data: st.DataObject,
) -> None:
    """Between none and every record read; every record when no task left any, none
    when each stopped at its range's start; more as any task gets further."""
    ranges = {k: (min(v), max(v)) for k, v in ranges.items()}
    tasks = {k: [f"{k[0]}{k[1]}_{b}" for b in range(factor)] for k in ranges}
    read = sum(end - begin for begin, end in ranges.values())
    assert processed_records(ranges, {}, tasks) == read
    nothing = {(t, *k): ranges[k][0] for k, ts in tasks.items() for t in ts}
    assert processed_records(ranges, nothing, tasks) == 0
    left = {(t, *k): data.draw(st.integers(ranges[k][0], ranges[k][1]))
            for k, ts in tasks.items() for t in ts}
    done = processed_records(ranges, left, tasks)
    assert 0 <= done <= read
    further = {spot: min(offset + 1, ranges[spot[1:]][1]) for spot, offset in left.items()}
    assert processed_records(ranges, further, tasks) >= done
