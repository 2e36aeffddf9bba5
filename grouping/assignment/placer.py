"""Balanced, sticky placement of one class of task copies over processors."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from itertools import compress

from grouping.assignment.slots import LoadQueue, Slots
from grouping.assignment.targets import window_targets
from grouping.assignment.world import World
from grouping.errors import GroupingError

# Placement of one class of tasks


class Placer:
    """Balanced, sticky placement of a list of units (task copies) over processors.

    ``unit_task[k]`` is the task index of unit k; ``sticky[k]`` its sticky processor or -1;
    ``excluded(k, j)`` forbids a processor (another copy of the task is there);
    ``lag_aware`` makes caught-up processors preferred (stateful actives);
    ``avoid_locations(k)`` names locations to avoid when possible (standbys);
    ``prefer_state`` sends a unit that cannot stay where it was to a processor that already
    holds some state of its task, when one has room (standbys: a warm-up from the last
    round becomes the standby, instead of starting another warm-up elsewhere).
    """

    def __init__(
        self,
        world: World,
        unit_task: Sequence[int],
        sticky: Sequence[int],
        base: Sequence[int],
        *,
        lag_aware: bool,
        excluded: Callable[[int, int], bool] | None = None,
        exclusions: Callable[[int], Sequence[int]] | None = None,
        avoid_locations: Callable[[int], AbstractSet[str]] | None = None,
        group_cohesion: bool = True,
        on_place: Callable[[int, int], None] | None = None,
        on_remove: Callable[[int, int], None] | None = None,
        prefer_state: bool = False,
    ) -> None:
        self.w = world
        self.prefer_state = prefer_state
        self.on_place = on_place
        self.on_remove = on_remove
        self.unit_task = unit_task
        self.sticky = sticky
        self.lag_aware = lag_aware
        self.excluded = excluded
        self.exclusions = exclusions
        self.avoid_locations = avoid_locations
        self.group_cohesion = group_cohesion
        m = world.m
        keep_lists: list[list[int]] = [[] for _ in range(m)]
        for k, s in enumerate(sticky):
            if s >= 0:
                keep_lists[s].append(k)
        self.targets = window_targets(
            [len(x) for x in keep_lists], base, len(unit_task), world.params.balance_factor
        )
        self.slots = Slots(self.targets, base)
        self.place: list[int] = [-1] * len(unit_task)
        self.on_proc: list[list[int]] = [[] for _ in range(m)]
        self.group_procs: dict[int, dict[int, int]] = {}
        self._keep_lists = keep_lists
        # Load queues are built once the sticky units are kept (see _open_queues).
        self.all_queue = LoadQueue((), self.slots.load)
        self.loc_queue: dict[str, LoadQueue] = {}
        self.aug_budget = 50_000
        self._plain_followers = False  # set by run()

    # -- bookkeeping

    def _assign(self, k: int, j: int) -> None:
        self.slots.take(j)
        self.place[k] = j
        self.on_proc[j].append(k)
        if self.group_cohesion:
            g = self.w.group[self.unit_task[k]]
            procs = self.group_procs.setdefault(g, {})
            procs[j] = procs.get(j, 0) + 1
        self.all_queue.touch(j)
        if self.loc_queue:
            self.loc_queue[self.w.location[j]].touch(j)
        if self.on_place is not None:
            self.on_place(k, j)

    def _follow(self, orphans: Sequence[int], i: int, k: int, j: int) -> int:
        """Book on j, in bulk, the orphans from ``orphans[i]`` on that are of unit k's
        partition group and that :meth:`_choose` would send after k, to j (the group's
        only processor so far); the index of the first orphan left. The same decisions as
        one by one: with the group on j alone and no lag, state or locality to weigh,
        ``_choose`` takes j while j is open. From scratch, 7 of 8 units of a group follow
        their first (100k tasks: a third of the assignment's time)."""
        if self.excluded is not None or self.on_place is not None:
            return i  # exclusions may follow each placement (copies of one task)
        w, unit_task = self.w, self.unit_task
        g = w.group[unit_task[k]]
        gp = self.group_procs[g]
        if len(gp) != 1:
            return i
        room = self.slots.room(j)
        lag_aware, prefer_state = self.lag_aware, self.prefer_state
        no_locations = self.avoid_locations is None
        group, good, lag_of, locality = w.group, w.good, w.lag_of, w.locality
        end, n = i, len(orphans)
        limit = min(n, i + room)
        if self._plain_followers:  # nothing but the group to weigh (from scratch)
            while end < limit and group[unit_task[orphans[end]]] == g:
                end += 1
        while end < limit:
            v = orphans[end]
            u = unit_task[v]
            if group[u] != g or (lag_aware and good[u] is not None) \
                    or (prefer_state and lag_of[u]) \
                    or (no_locations and locality[u] is not None):
                break
            end += 1
        if end > i:
            followers = orphans[i:end]
            self.slots.take_many(j, end - i)
            place = self.place
            for v in followers:
                place[v] = j
            self.on_proc[j].extend(followers)
            gp[j] += end - i
            self.all_queue.touch(j)
            if self.loc_queue:
                self.loc_queue[w.location[j]].touch(j)
        return end

    def _move(self, k: int, src: int, dst: int) -> None:
        """Move unit k from src to dst; src keeps its slot for the caller to refill."""
        self.on_proc[src].remove(k)
        if self.group_cohesion:
            procs = self.group_procs.setdefault(self.w.group[self.unit_task[k]], {})
            if procs.get(src, 0) > 1:
                procs[src] -= 1
            else:
                procs.pop(src, None)
        self.slots.release(src)
        if self.on_remove is not None:
            self.on_remove(k, src)
        self._assign(k, dst)

    def _eligible(self, k: int, j: int) -> bool:
        return self.excluded is None or not self.excluded(k, j)

    # -- the two phases

    def run(self) -> list[int]:
        orphans = self._keep()
        w, unit_task = self.w, self.unit_task
        good = w.good
        any_good = good.count(None) != len(good)  # some task's lags are known (in C)
        # followers of a group's first unit have nothing but their group to weigh
        self._plain_followers = not self.prefer_state and not (
            self.avoid_locations is None and w.any_locality) and not (
            self.lag_aware and any_good)
        # without any lag known for an orphan, the lag-aware order and choice are the
        # plain ones (_choose_caught_up is _choose then): no sort of 100k orphans
        if self.lag_aware and any_good \
                and any(good[unit_task[k]] is not None for k in orphans):
            # Caught-up placements first, so that a task no caught-up processor can take
            # (it will get a warm-up) does not use up a slot a caught-up task needs.
            deferred = []
            ordered = sorted(orphans, key=self._constraint_order)
            i, n = 0, len(ordered)
            while i < n:
                k = ordered[i]
                i += 1
                j = self._choose_caught_up(k)
                if j < 0:
                    deferred.append(k)
                    continue
                self._assign(k, j)
                if self.group_cohesion and good[unit_task[k]] is None:
                    i = self._follow(ordered, i, k, j)  # chosen as _choose would
            orphans = deferred
        i, n = 0, len(orphans)
        while i < n:
            k = orphans[i]
            j = self._choose(k)
            self._assign(k, j)
            i += 1
            if self.group_cohesion:
                i = self._follow(orphans, i, k, j)
        return self.place

    def _choose_caught_up(self, k: int) -> int:
        """An open caught-up processor for unit k (freeing one if needed), or -1."""
        w, slots = self.w, self.slots
        u = self.unit_task[k]
        good = w.good[u]
        if good is None:
            return self._choose(k)
        loc = w.locality[u]
        gp = self.group_procs.get(w.group[u], {})
        cands = [q for q in good if slots.open(q) and self._eligible(k, q)]
        if cands:
            load = slots.load
            return min(cands, key=lambda q: (w.location[q] != loc, q not in gp, load[q], q))
        return self._augment(k, good)

    def _constraint_order(self, k: int) -> tuple[int, int]:
        good = self.w.good[self.unit_task[k]]
        return (self.w.m if good is None else len(good), k)

    def _keep(self) -> list[int]:
        """Assign each processor the sticky units it keeps; return the rest, in unit order."""
        w, targets = self.w, self.targets
        floor = targets.floor
        # Processors with room after keeping their sticky units: alternatives for give-ups.
        room = [
            len(self._keep_lists[j]) < floor[j]
            or (targets.pool > 0 and len(self._keep_lists[j]) < targets.cap[j])
            for j in range(w.m)
        ]
        room_count = sum(room)
        orphans: list[int] = []
        for j in range(w.m):
            cands = self._keep_lists[j]
            limit = floor[j]
            if len(cands) > limit:
                ranked = sorted(self._give_up_order(j, cands, room, room_count))
                cands = [key[-1] for key in ranked[:limit]]
                orphans.extend(key[-1] for key in ranked[limit:])
            self._keep_all(j, cands)
        sticky = self.sticky
        orphans.extend(compress(range(len(sticky)), [s < 0 for s in sticky]))
        orphans.sort()
        self._open_queues(orphans)
        return orphans

    def _give_up_order(
        self, j: int, units: list[int], room: list[bool], room_count: int
    ) -> list[tuple[bool, bool, int, int]]:
        """Sort keys (unit last) for the sticky units of an overfull processor j: those
        given up first sort last. First to go: units j is not caught up on, then units
        another processor with room could take, then units of the partition groups j holds
        least of, then later units."""
        w, unit_task = self.w, self.unit_task
        group = w.group
        unit_group = [group[unit_task[k]] for k in units]
        held = Counter(unit_group) if self.group_cohesion else None
        good = w.good if self.lag_aware else None
        exclusions = self.exclusions
        # for a unit any processor may run (and no copy elsewhere to avoid): j alone aside
        free_alternative = room_count - (1 if room[j] else 0) > 0
        keys: list[tuple[bool, bool, int, int]] = []
        append = keys.append
        for k, g in zip(units, unit_group, strict=True):
            cohesion_rank = 0 if held is None else -held[g]
            gd = None if good is None else good[unit_task[k]]
            if gd is None:
                if exclusions is None:
                    append((False, free_alternative, cohesion_rank, k))
                    continue
            elif len(gd) == 1 and gd[0] == j:  # caught up on j alone: nowhere else to go
                append((False, False, cohesion_rank, k))
                continue
            append((gd is not None and j not in gd,
                    self._has_alternative(k, j, room, room_count), cohesion_rank, k))
        return keys

    def _keep_all(self, j: int, units: list[int]) -> None:
        """Book ``units`` on j in bulk (no queue updates: the queues come after)."""
        self.slots.take_many(j, len(units))
        place = self.place
        for k in units:
            place[k] = j
        self.on_proc[j].extend(units)
        if self.on_place is not None:
            for k in units:
                self.on_place(k, j)

    def _open_queues(self, orphans: list[int]) -> None:
        """Build load queues and partition-group locations, needed only to place orphans."""
        w = self.w
        load = self.slots.load
        self.all_queue = LoadQueue(range(w.m), load)
        # by location only when an orphan's task has a last location to return to (and
        # no location is to be avoided): the only use of these queues
        locality, unit_task = w.locality, self.unit_task
        if self.avoid_locations is None and w.any_locality and any(
                locality[unit_task[k]] is not None for k in orphans):
            by_loc: dict[str, list[int]] = {}
            for j, loc in enumerate(w.location):
                by_loc.setdefault(loc, []).append(j)
            self.loc_queue = {loc: LoadQueue(js, load) for loc, js in by_loc.items()}
        if not self.group_cohesion or not orphans or len(orphans) == len(self.unit_task):
            return  # (every unit an orphan, as from scratch: no group is anywhere yet)
        unit_group = list(map(w.group.__getitem__, self.unit_task))
        wanted = {unit_group[k] for k in orphans}
        place = self.place
        # only units of the orphans' groups (few, after a small change), picked out in C
        for k in compress(range(len(unit_group)), map(wanted.__contains__, unit_group)):
            j = place[k]
            if j >= 0:
                procs = self.group_procs.setdefault(unit_group[k], {})
                procs[j] = procs.get(j, 0) + 1

    def _has_alternative(self, k: int, j: int, room: list[bool], room_count: int) -> bool:
        """True when unit k could go to another processor that has room."""
        u = self.unit_task[k]
        good = self.w.good[u] if self.lag_aware else None
        if good is not None:
            return any(q != j and room[q] and self._eligible(k, q) for q in good)
        blocked = 0
        if self.exclusions is not None:
            blocked = sum(1 for q in set(self.exclusions(k)) if q != j and room[q])
        return room_count - (1 if room[j] else 0) - blocked > 0

    def _choose(self, k: int) -> int:
        w, slots = self.w, self.slots
        u = self.unit_task[k]
        load = slots.load
        if self.lag_aware and w.good[u] is not None:
            # No caught-up processor can take it: the target becomes a warm-up, best where
            # some state already is (a warm-up in progress), by smallest known lag.
            known = [q for q in w.lag_of[u] if slots.open(q) and self._eligible(k, q)]
            if known:
                return min(known, key=lambda q: (w.rank(u, q), load[q], q))

        if self.prefer_state and w.lag_of[u]:
            known = [q for q in w.lag_of[u] if slots.open(q) and self._eligible(k, q)]
            if known:
                avoid_here = self.avoid_locations(k) if self.avoid_locations else frozenset()
                return min(known, key=lambda q: (w.location[q] in avoid_here, w.rank(u, q),
                                                 load[q], q))

        def eligible(j: int) -> bool:
            return self._eligible(k, j)
        elig = eligible if self.excluded is not None else None
        loc = w.locality[u]
        if loc is not None and self.avoid_locations is None:
            q = self.loc_queue[loc].best(slots.open, elig) if loc in self.loc_queue else -1
            if q >= 0:
                return q
        if self.group_cohesion:
            gp = self.group_procs.get(w.group[u])
            if gp:
                cands = [q for q in gp if slots.open(q) and self._eligible(k, q)]
                if cands:
                    return min(cands, key=lambda q: (load[q], q))
        if self.avoid_locations is not None:
            avoid = self.avoid_locations(k)
            if avoid:
                q = self.all_queue.best(
                    slots.open, elig, prefer=lambda j: w.location[j] not in avoid)
                if q >= 0:
                    return q
        q = self.all_queue.best(slots.open, elig)
        if q >= 0:
            return q
        # Every open processor already holds a copy of this task: swap with a unit that can
        # go there, else exceed a target (balance gives way to "one copy per processor").
        q = self._swap_for(k)
        if q >= 0:
            return q
        cands = [j for j in range(w.m) if self._eligible(k, j)]
        if not cands:
            raise GroupingError(f"no processor can take a copy of task {w.names[u]!r}")
        q = min(cands, key=lambda j: (load[j], j))
        self.slots.force(q)
        return q

    def _swap_for(self, k: int) -> int:
        """Move a unit v from an eligible full processor q to an open processor p that v may
        use, so that k can take v's place on q. Returns q, or -1 when no swap exists."""
        w, slots = self.w, self.slots
        open_procs = [p for p in range(w.m) if slots.open(p)]
        for q in sorted(range(w.m), key=lambda j: (slots.load[j], j)):
            if not self._eligible(k, q):
                continue
            for v in self.on_proc[q]:
                if self.aug_budget <= 0:
                    return -1
                self.aug_budget -= 1
                for p in open_procs:
                    if p != q and self._eligible(v, p):
                        self._move(v, q, p)
                        return q
        return -1

    def _augment(self, k: int, good: tuple[int, ...]) -> int:
        """Free a slot on a caught-up processor of unit k by moving one of its units to a
        processor caught up on that unit which has room. Returns the freed processor or -1.

        Bounded: at most ``_AUGMENT_SCAN`` units per processor, newest first (units placed
        after the sticky ones), and ``aug_budget`` units per assignment."""
        w, slots = self.w, self.slots
        if self.aug_budget <= 0:
            return -1
        for p in sorted(good, key=lambda q: (slots.load[q], q)):
            if not self._eligible(k, p):
                continue
            units = self.on_proc[p]
            for v in units[: -_AUGMENT_SCAN - 1 : -1]:
                if self.aug_budget <= 0:
                    return -1
                self.aug_budget -= 1
                vgood = w.good[self.unit_task[v]]
                if vgood is None:
                    continue  # placed freely: moving it does not make the assignment better
                dst = [q for q in vgood if q != p and slots.open(q) and self._eligible(v, q)]
                if dst:
                    q = min(dst, key=lambda q: (slots.load[q], q))
                    self._move(v, p, q)
                    return p
        return -1


#: Units examined per processor when freeing a caught-up slot (see Placer._augment).
_AUGMENT_SCAN = 256
