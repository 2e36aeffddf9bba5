"""When a worker's source looks at its input: at most once per batch gap (the worker's
``--trigger-interval``), and at once when its source plan changes.

Spark's processing-time trigger starts a batch only on its interval's ticks. A handover
adds tasks between two ticks: the children of a split, composed a few tens of
milliseconds after a tick, waited for the next one, so a split's pause was a whole
interval longer whenever the chain before it (the parent's batch end, its last commit,
the children's composition) missed a tick by a little. The worker's query therefore
ticks often (:func:`poll_interval`) and its source paces itself: between two looks at
the input at least the gap passes (Kafka's end offsets, Kinesis's GetRecords, whose
per-shard read limit is five a second), unless the plan added something to read since
the last look, when the tasks just added are read at the next tick.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from worker.sources.source_plan import SourcePlan

#: the query's trigger when its source paces itself: how late, at most, a batch of tasks
#: just added starts (each tick not due costs a plan-file read in the source's process)
POLL_S = 0.05


def poll_interval(gap_s: float) -> float:
    """The query's trigger interval for a batch gap of ``gap_s``."""
    return min(gap_s, POLL_S)


def adds(plan: SourcePlan, read: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether ``plan`` names a partition the last batch (its offsets' ``read``: key ->
    ``{"g": generation, ...}``) did not read, or reads one again from elsewhere."""
    return any(k not in read or read[k].get("g") != p.generation
               for k, p in plan.partitions.items())


class Pacing:
    """The source's own trigger: :meth:`due` says whether to look at the input now,
    :meth:`looked` records a look (whether or not it found records)."""

    def __init__(self, gap_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._gap_s = gap_s
        self._clock = clock
        self._version: int | None = None  # the plan version of the last look
        self._at = float("-inf")  # when the last look was

    def due(self, plan_version: int, adds: bool = True) -> bool:
        """Whether to look now: the gap has passed since the last look, or the plan
        changed since and ``adds`` something to read (a partition or shard, or one read
        again from elsewhere: tasks gained). A plan that only drops some waits for the
        gap: a batch planned at once would only read less (a handover's lost tasks
        stop before the gained ones are ready, and such a batch would hold theirs up)."""
        if plan_version != self._version and adds:
            return True
        return self._clock() - self._at >= self._gap_s

    def looked(self, plan_version: int) -> None:
        self._version = plan_version
        self._at = self._clock()
