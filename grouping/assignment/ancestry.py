"""Each task's lineage and last location, read from the previous model on demand.

The assignment traces every task's partition group and sticky processor in one pass
(:class:`grouping.assignment.world.World`), but it needs a task's lineage *names*, and its
last location (which follows lineage), only for some tasks: the lag pass that reads reports
by task name, and the tasks placement places anew. After a factor change every task has a
new name and one or two predecessors among 100k-200k previous tasks spread over the heap:
reading their names and looking each task up in the locality map took 60-80 ms of a 300 ms
generation, mostly for tasks that stay where they were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grouping.lineage import GroupHistory, PreviousAssignment
from grouping.model import TaskModel


class TaskLineage:
    """Task u -> the names of the previous tasks it descends from, by the rules of
    :meth:`PreviousAssignment.lineage`: those of its group history whose key space overlaps
    its own, else (a group the previous model did not have) the previous task of its own
    name, recorded by the tracing pass in :attr:`by_name`."""

    __slots__ = ("_factor", "_group", "_histories", "_prev", "_tasks", "by_name")

    def __init__(self, tasks: Sequence[TaskModel], group: Sequence[int],
                 histories: Sequence[GroupHistory], prev: PreviousAssignment,
                 factor: int) -> None:
        self._tasks = tasks
        self._group = group  # task u -> index into histories
        self._histories = histories
        self._prev = prev
        self._factor = factor
        #: task u -> (its own name,), for the tasks whose lineage goes by name
        self.by_name: dict[int, tuple[str, ...]] = {}

    def __getitem__(self, u: int) -> tuple[str, ...]:
        history = self._histories[self._group[u]]
        found = self._prev.lineage_in(history, self._tasks[u].key_bucket, self._factor)
        return found or self.by_name.get(u, ())

    def all(self) -> list[tuple[str, ...]]:
        """Every task's lineage, in one pass (what reading each in turn gives)."""
        prev, factor, by_name = self._prev, self._factor, self.by_name
        histories, group = self._histories, self._group
        overlapping_of: dict[int, tuple[int, ...]] = {}
        out: list[tuple[str, ...]] = []
        append = out.append
        for u, t in enumerate(self._tasks):
            bucket = t.key_bucket
            overlapping = overlapping_of.get(bucket)
            if overlapping is None:  # the same few buckets for every group
                overlapping = overlapping_of[bucket] = tuple(
                    prev.overlapping_buckets(bucket, factor))
            known = histories[group[u]].tasks
            if len(overlapping) == 1:  # the same tasks, or a split: one predecessor
                parent = known.get(overlapping[0])
                lineage: tuple[str, ...] = () if parent is None else (parent.name,)
            else:
                lineage = tuple(known[b].name for b in overlapping if b in known)
            append(lineage or by_name.get(u, ()))
        return out


class LastLocations(dict[int, str | None]):
    """Task u -> its last location: its own name's in the known locality, else its first
    ancestor's that has one (None: unknown); looked up on first read and kept."""

    __slots__ = ("_known", "_lineage", "_names")

    def __init__(self, known: Mapping[str, str], names: Sequence[str],
                 lineage: TaskLineage) -> None:
        super().__init__()
        self._known = known
        self._names = names
        self._lineage = lineage

    def __missing__(self, u: int) -> str | None:
        known = self._known
        location = known.get(self._names[u])
        if location is None:
            for ancestor in self._lineage[u]:
                location = known.get(ancestor)
                if location is not None:
                    break
        self[u] = location
        return location
