"""Balanced targets: per-processor bounds that keep the most tasks on their sticky owner."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from grouping.errors import GroupingError


@dataclass(frozen=True, slots=True)
class WindowTargets:
    """Per-processor bounds for one class of tasks.

    Processor j gets at least ``floor[j]`` and at most ``cap[j]`` tasks, and ``pool`` more
    tasks than ``sum(floor)`` are handed out in all. ``kept`` is how many tasks can stay on
    their sticky owner.
    """

    floor: tuple[int, ...]
    cap: tuple[int, ...]
    pool: int
    kept: int


def window_targets(
    keep_counts: Sequence[int], base: Sequence[int], total: int, balance_factor: int
) -> WindowTargets:
    """Targets that keep the most tasks in place with loads within ``balance_factor``.

    ``keep_counts[j]`` tasks could stay on processor j; ``base[j]`` is load j already has
    from another class of tasks (e.g. stateful actives when placing stateless ones).
    Final loads ``base[j] + x[j]`` lie in one window ``[L, L + balance_factor]``, except
    that a processor whose base alone exceeds the window gets nothing. Among windows, the
    one keeping most tasks wins; ties go to the higher (more even) window.
    """
    m = len(keep_counts)
    if m == 0:
        raise GroupingError("cannot balance tasks over zero processors")
    b = balance_factor
    ordered = sorted(base)
    prefix = [0]
    for x in ordered:
        prefix.append(prefix[-1] + x)

    def fill(level: int) -> int:
        # sum over j of max(0, level - base[j]): tasks needed to lift everyone to `level`.
        lo, hi = 0, m
        while lo < hi:
            mid = (lo + hi) // 2
            if ordered[mid] < level:
                lo = mid + 1
            else:
                hi = mid
        return level * lo - prefix[lo]

    def lowest_level_reaching(amount: int) -> int:
        lo, hi = ordered[0], ordered[0] + amount + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if fill(mid) >= amount:
                hi = mid
            else:
                lo = mid + 1
        return lo

    level_hi = lowest_level_reaching(total + 1) - 1  # max L with fill(L) <= total
    level_lo = lowest_level_reaching(total) - b  # min L with fill(L + b) >= total
    best: WindowTargets | None = None
    for level in range(level_hi, level_lo - 1, -1):
        # max/min spelled as conditional expressions: no call per processor (1000s)
        top = level + b
        lo_j = [level - x if x < level else 0 for x in base]
        hi_j = [top - x if x < top else 0 for x in base]
        want = [lo if k < lo else hi if k > hi else k
                for k, lo, hi in zip(keep_counts, lo_j, hi_j, strict=True)]
        excess = sum(want) - total
        if excess > 0:
            # Take the excess from the most loaded processors that are above their floor.
            heap = [(-(base[j] + want[j]), j) for j in range(m) if want[j] > lo_j[j]]
            heapq.heapify(heap)
            while excess > 0:
                _, j = heapq.heappop(heap)
                want[j] -= 1
                excess -= 1
                if want[j] > lo_j[j]:
                    heapq.heappush(heap, (-(base[j] + want[j]), j))
            pool = 0
            cap = tuple(want)
        else:
            pool = -excess
            cap = tuple(hi_j)
        kept = sum([k if k < w else w for k, w in zip(keep_counts, want, strict=True)])
        if best is None or kept > best.kept:
            best = WindowTargets(tuple(want), cap, pool, kept)
    assert best is not None
    return best
