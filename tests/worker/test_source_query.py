"""When the worker's query starts and what it reads (``worker.runtime.query``): the
decisions, with the Spark query's own start replaced by a record of what it would read
(the real start is the end-to-end tests': the warm scale-out asserts the order)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from worker.plan import QueryPlan, SspStart
from worker.running import Running
from worker.runtime.contexts import WorkerConfig
from worker.runtime.query import SourceQuery


class _Started:
    """What a started query offers the class: an id and stop()."""

    def __init__(self, reads: tuple[str, str | None]) -> None:
        self.id, self.reads, self.stopped = f"q-{reads}", reads, False

    def stop(self) -> None:
        self.stopped = True


class Recording(SourceQuery):
    """A SourceQuery whose starts are recorded instead of made in Spark."""

    def __init__(self, root: Path, fail: bool = False) -> None:
        super().__init__(cast(Any, None), WorkerConfig("http://c", "k:9092",
                                                       checkpoint_root=root),
                         lambda *_: None)
        self.starts: list[_Started] = []
        self.fail = fail

    def _start(self, reads: tuple[str, str | None]) -> None:
        if self.fail:
            raise RuntimeError("no Python worker")
        self._query, self._reads = _Started(reads), reads
        self.starts.append(self._query)


def running(system: str, stream: str) -> Running:
    return Running(QueryPlan(1, 1, (SspStart("Partition 0", stream, 0, -1, 5),), (),
                             system=system))


def test_a_query_warmed_for_standby_copies_serves_the_tasks_that_come(tmp_path: Path) -> None:
    q = Recording(tmp_path)
    q.warm("kafka", "orders")
    assert (tmp_path / "source-plan.json").exists()  # the source reads nothing from it
    q.warm("kafka", "orders")
    q.apply(running("kafka", "orders"))
    assert [s.reads for s in q.starts] == [("kafka", None)]  # one query, kept


def test_tasks_reading_another_input_than_the_warmed_query_get_a_new_one(
    tmp_path: Path,
) -> None:
    q = Recording(tmp_path)
    q.warm("kinesis", "clicks")
    q.apply(running("kinesis", "views"))
    assert [s.reads for s in q.starts] == [("kinesis", "clicks"), ("kinesis", "views")]
    assert q.starts[0].stopped
    # from then on the tasks' query is the worker's one: another input is refused
    with pytest.raises(ValueError, match="one input system"):
        q.apply(running("kafka", "orders"))


def test_a_query_dead_at_its_warm_start_is_not_started_again_until_forgotten(
    tmp_path: Path,
) -> None:
    q = Recording(tmp_path, fail=True)
    q.warm("kafka", "orders")
    assert q.failure() is not None and "no Python worker" in q.failure()  # type: ignore[operator]
    q.fail = False
    q.apply(running("kafka", "orders"))
    assert q.starts == []  # the handover's recovery forgets it first
    q.forget()
    q.apply(running("kafka", "orders"))
    assert [s.reads for s in q.starts] == [("kafka", None)]
