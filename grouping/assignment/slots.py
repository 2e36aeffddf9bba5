"""How many more tasks each processor may take, and processors ordered by load."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence

from grouping.assignment.targets import WindowTargets


class LoadQueue:
    """Processors ordered by (load, index), lazily updated: stale entries are skipped."""

    __slots__ = ("_heap", "_load")

    def __init__(self, members: Iterable[int], load: list[int]) -> None:
        self._load = load
        self._heap = [(load[j], j) for j in members]
        heapq.heapify(self._heap)

    def touch(self, j: int) -> None:
        heapq.heappush(self._heap, (self._load[j], j))

    def best(
        self,
        open_: Callable[[int], bool],
        eligible: Callable[[int], bool] | None,
        prefer: Callable[[int], bool] | None = None,
        scan: int = 32,
    ) -> int:
        """Least loaded open processor eligible for the task, or -1.

        With ``prefer``, the least loaded preferred processor among the first ``scan``
        eligible ones wins, else the least loaded eligible one.
        """
        heap, load = self._heap, self._load
        aside: list[tuple[int, int]] = []
        first = -1
        found = -1
        seen = 0
        while heap:
            lj, j = heap[0]
            if lj != load[j] or not open_(j):
                heapq.heappop(heap)  # stale, or full for good: slots never reopen
                continue
            aside.append(heapq.heappop(heap))
            if eligible is not None and not eligible(j):
                continue
            if first < 0:
                first = j
            if prefer is None or prefer(j):
                found = j
                break
            seen += 1
            if seen >= scan:
                break
        for entry in aside:
            heapq.heappush(heap, entry)
        return found if found >= 0 else first


class Slots:
    """How many more tasks each processor may take under a :class:`WindowTargets`."""

    __slots__ = ("assigned", "base", "cap", "floor", "load", "pool")

    def __init__(self, targets: WindowTargets, base: Sequence[int]) -> None:
        self.floor = targets.floor
        self.cap = targets.cap
        self.pool = targets.pool
        self.base = list(base)
        self.assigned = [0] * len(base)
        self.load = list(base)

    def open(self, j: int) -> bool:
        a = self.assigned[j]
        return a < self.floor[j] or (a < self.cap[j] and self.pool > 0)

    def room(self, j: int) -> int:
        """How many take(j) in a row find j open: up to its floor, then up to its cap
        while the shared pool lasts."""
        a, floor = self.assigned[j], self.floor[j]
        beyond = min(self.cap[j] - max(a, floor), self.pool) if self.pool > 0 else 0
        return max(0, floor - a) + max(0, beyond)

    def take(self, j: int) -> None:
        if self.assigned[j] >= self.floor[j]:
            self.pool -= 1
        self.assigned[j] += 1
        self.load[j] += 1

    def take_many(self, j: int, count: int) -> None:
        """take(j), ``count`` times."""
        assigned = self.assigned[j]
        beyond_floor = assigned + count - max(assigned, self.floor[j])
        if beyond_floor > 0:
            self.pool -= beyond_floor
        self.assigned[j] = assigned + count
        self.load[j] += count

    def release(self, j: int) -> None:
        """Undo one take() on j."""
        self.assigned[j] -= 1
        self.load[j] -= 1
        if self.assigned[j] >= self.floor[j]:
            self.pool += 1

    def force(self, j: int) -> None:
        """Raise j's target by one, so that the next take() on j fits beyond the window."""
        self.floor = (*self.floor[:j], self.floor[j] + 1, *self.floor[j + 1:])
        self.cap = (*self.cap[:j], max(self.cap[j], self.floor[j]), *self.cap[j + 1:])
