"""The state of a Kinesis job's tasks across splits, merges and factor changes (pure): a
model of a stream whose shards split and merge while records are put (each to the open
shard whose hash-key range holds the MD5 of its key), per-key counting folds in tasks
of (shard, key bucket), checkpoints resolved by DESIGN.md's rule, parents before
children (``checkpoint.shard_ends``) and state restored from the snapshots
``state_sources`` picks, filtered as the worker's composition filters them. Through
random interleavings, every task that starts holds, for each of its keys, the fold of
exactly the key's records below where it starts, its ancestor shards' included; after
a drain every key's count is its number of records."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint.commit import EntryKey
from checkpoint.model import ResetPolicy, StartOffset
from checkpoint.resolution import resolve_ssp_start
from checkpoint.shard_ends import waiting_for
from checkpoint.state_sources import HeldState, StateSource, state_sources
from grouping.key_bucket import key_bucket
from grouping.key_hash import DEFAULT_KEY_HASH
from grouping.model import SystemStreamPartition
from grouping.shards import MAX_HASH_KEY, Lineage, Shard, hash_key

SYSTEM, STREAM = "kinesis", "orders"
KEYS = [f"customer-{i}".encode() for i in range(16)]
MAX_SHARDS = 12


def ssp(partition: int, bucket: int = -1) -> SystemStreamPartition:
    return SystemStreamPartition(SYSTEM, STREAM, partition, bucket)


@dataclass
class Task:
    partition: int
    bucket: int
    started: bool = False
    position: int = 0  # the next sequence number to read
    skip: tuple[tuple[int, int, int], ...] = ()  # (factor, bucket, offset)
    live: Counter[bytes] = field(default_factory=Counter)
    touched: bool = False


@dataclass
class Job:
    """One stream; the real resolution, parents-before-children and state rules."""

    shards: dict[int, Shard] = field(default_factory=dict)
    records: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    next_sequence: int = 1
    factor: int = 1
    version: int = 1
    entries: dict[int, dict[tuple[int, int], int]] = field(default_factory=dict)
    held: dict[str, HeldState] = field(default_factory=dict)
    snapshots: dict[str, Counter[bytes]] = field(default_factory=dict)
    tasks: dict[tuple[int, int], Task] = field(default_factory=dict)
    ids: int = 0

    @classmethod
    def of(cls, shards: int) -> Job:
        job = cls()
        width = (MAX_HASH_KEY + 1) // shards
        for p in range(shards):
            high = MAX_HASH_KEY if p == shards - 1 else (p + 1) * width - 1
            job.open(p, (), (p * width, high))
        job.restart()
        return job

    # -- the stream

    def open(self, partition: int, parents: tuple[int, ...], hashes: tuple[int, int]) -> None:
        self.shards[partition] = Shard(partition, parents, hashes, self.next_sequence)
        self.records[partition] = []
        for b in range(self.factor):
            self.tasks[(partition, b)] = Task(partition, b)

    def close(self, partition: int) -> None:
        s = self.shards[partition]
        self.shards[partition] = Shard(partition, s.parents, s.hash_key_range,
                                       s.starting_sequence, self.next_sequence)
        self.next_sequence += 1

    def open_shards(self) -> list[Shard]:
        return sorted((s for s in self.shards.values() if not s.closed),
                      key=lambda s: s.hash_key_range[0])

    def put(self, key: bytes) -> None:
        h = hash_key(key)
        shard = next(s for s in self.open_shards()
                     if s.hash_key_range[0] <= h <= s.hash_key_range[1])
        self.records[shard.partition].append((self.next_sequence, key))
        self.next_sequence += 1

    def split(self, choice: int, fraction: float) -> None:
        candidates = [s for s in self.open_shards() if s.hash_key_range[1] > s.hash_key_range[0]]
        if not candidates or len(self.shards) + 2 > MAX_SHARDS:
            return
        parent = candidates[choice % len(candidates)]
        low, high = parent.hash_key_range
        # the new starting hash key, in integers: a float times a 128-bit width rounds,
        # and at 1.0 put it past ``high`` (an inverted child, overlapping ranges)
        at = low + 1 + (high - low - 1) * round(fraction * 1024) // 1024
        self.close(parent.partition)
        n = max(self.shards) + 1
        self.open(n, (parent.partition,), (low, at - 1))
        self.open(n + 1, (parent.partition,), (at, high))
        self.version += 1

    def merge(self, choice: int) -> None:
        shards = self.open_shards()
        pairs = list(pairwise(shards))
        if not pairs or len(self.shards) + 1 > MAX_SHARDS:
            return
        a, b = pairs[choice % len(pairs)]
        self.close(a.partition)
        self.close(b.partition)
        self.open(max(self.shards) + 1, (a.partition, b.partition),
                  (a.hash_key_range[0], b.hash_key_range[1]))
        self.version += 1

    # -- checkpoints and state

    def lineage(self) -> Lineage:
        return {(SYSTEM, STREAM): dict(self.shards)}

    def name(self, partition: int, bucket: int) -> str:
        return f"Partition {partition}_{bucket}_{self.factor}"

    def spaces(self, partition: int, bucket: int) -> tuple[EntryKey, ...]:
        return ((SYSTEM, STREAM, partition, self.factor, bucket),)

    def start_of(self, space: SystemStreamPartition) -> StartOffset:
        return resolve_ssp_start(space, self.factor, self.entries.get(space.partition, {}),
                                 ResetPolicy.EARLIEST).start

    def tick(self) -> None:
        """Start every task whose parents' key spaces are finished (a worker's restore)."""
        for (p, b), task in sorted(self.tasks.items()):
            if task.started or waiting_for([ssp(p, b)], self.lineage(), self.start_of):
                continue
            self.tasks[(p, b)] = self.restore(p, b)

    def restore(self, p: int, b: int) -> Task:
        start = resolve_ssp_start(ssp(p, b), self.factor, self.entries.get(p, {}),
                                  ResetPolicy.EARLIEST)
        first = 0 if isinstance(start.start, ResetPolicy) else start.start
        skip = tuple((w.factor, w.bucket, int(w.offset)) for w in start.skip_below)
        held = [replace(h, offsets={k: self.entries[k[2]][(k[3], k[4])] for k in h.key_spaces
                                    if (k[3], k[4]) in self.entries.get(k[2], {})})
                for h in self.held.values()]  # as GET /checkpoints ranks them
        sources = state_sources(self.spaces(p, b), held, self.lineage())
        live: Counter[bytes] = Counter()
        for source in sources:
            for key, count in self.snapshots[source.markers["blob"]["state"]].items():
                if kept(source, key):
                    assert key not in live  # the sources are disjoint
                    live[key] = count
        own = len(sources) == 1 and sources[0].task_name == self.name(p, b)
        task = Task(p, b, True, first, skip, live, touched=bool(sources) and not own)
        self.check(task)
        return task

    def ancestors(self, p: int) -> set[int]:
        found: set[int] = set()
        frontier = list(self.shards[p].parents)
        while frontier:
            q = frontier.pop()
            if q not in found:
                found.add(q)
                frontier.extend(self.shards[q].parents)
        return found

    def skipped(self, task: Task, offset: int, key: bytes) -> bool:
        return any(key_bucket(key, offset, f, DEFAULT_KEY_HASH) == b and offset < w
                   for f, b, w in task.skip)

    def check(self, task: Task) -> None:
        """Each key's state is the fold of exactly its records in the task's ancestor
        shards and in its own shard below where it starts (or skipped)."""
        low, high = self.shards[task.partition].hash_key_range
        before = self.ancestors(task.partition)
        for key in KEYS:
            if key_bucket(key, 0, self.factor, DEFAULT_KEY_HASH) != task.bucket \
                    or not low <= hash_key(key) <= high:
                assert task.live[key] == 0, (key, task)
                continue
            expected = sum(1 for q in before for _, k in self.records[q] if k == key)
            expected += sum(1 for o, k in self.records[task.partition] if k == key and (
                o < task.position or self.skipped(task, o, key)))
            assert task.live[key] == expected, (key, task, expected)

    def process(self, choice: int, n: int) -> None:
        started = [t for _, t in sorted(self.tasks.items()) if t.started]
        if not started:
            return
        self.run(started[choice % len(started)], n)

    def run(self, task: Task, n: int) -> None:
        shard = self.shards[task.partition]
        pending = [(o, k) for o, k in self.records[task.partition] if o >= task.position]
        for offset, key in pending[:n]:
            if key_bucket(key, offset, self.factor, DEFAULT_KEY_HASH) == task.bucket \
                    and not self.skipped(task, offset, key):
                task.live[key] += 1
                task.touched = True
            task.position = offset + 1
        if len(pending) <= n and shard.end_offset is not None:
            task.position = max(task.position, shard.end_offset)  # read to its end

    def commit(self, task: Task) -> None:
        if not task.started:
            return
        entries = self.entries.setdefault(task.partition, {})
        if task.position > entries.get((self.factor, task.bucket), -1):
            entries[(self.factor, task.bucket)] = task.position
        if task.touched:
            self.ids += 1
            name = self.name(task.partition, task.bucket)
            marker = f"{name}/{self.ids}"
            self.snapshots[marker] = Counter(task.live)
            self.held[name] = HeldState(name, str(self.ids), {"blob": {"state": marker}},
                                        self.version, self.spaces(task.partition, task.bucket))
            task.touched = False

    def restart(self) -> None:
        """Every task restores from its committed state (a crash, a factor change)."""
        self.tasks = {(p, b): Task(p, b) for p in self.shards for b in range(self.factor)}
        self.tick()

    def scale(self, factor: int, graceful: bool) -> None:
        if graceful:
            for task in self.tasks.values():
                self.commit(task)
        self.factor, self.version = factor, self.version + 1
        self.restart()

    def drain(self) -> None:
        while True:
            before = {k: (t.started, t.position) for k, t in self.tasks.items()}
            for task in list(self.tasks.values()):
                if task.started:
                    self.run(task, 10**6)
                    self.commit(task)
            self.tick()
            if before == {k: (t.started, t.position) for k, t in self.tasks.items()}:
                return


def kept(source: StateSource, key: bytes) -> bool:
    """What the worker's composition keeps of a source snapshot (worker.state.compose)."""
    if key_bucket(key, 0, source.factor, DEFAULT_KEY_HASH) not in source.buckets:
        return False
    if source.hash_key_range is None:
        return True
    low, high = source.hash_key_range
    return low <= hash_key(key) <= high


ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=12)),
    st.tuples(st.just("process"), st.integers(0, 40), st.integers(1, 8)),
    st.tuples(st.just("commit"), st.integers(0, 40)),
    st.tuples(st.just("crash")),
    st.tuples(st.just("scale"), st.sampled_from([1, 2, 4]), st.booleans()),
    st.tuples(st.just("split"), st.integers(0, 8), st.floats(0, 1)),
    st.tuples(st.just("merge"), st.integers(0, 8)),
), max_size=50)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3), ops)
def test_state_follows_every_key_across_splits_merges_and_factor_changes(
        shards: int, steps: list[tuple[object, ...]]) -> None:
    job = Job.of(shards)
    for step in steps:
        kind = step[0]
        if kind == "put":
            for key in step[1]:  # type: ignore[attr-defined]
                job.put(key)
        elif kind == "process":
            job.process(int(step[1]), int(step[2]))  # type: ignore[call-overload]
        elif kind == "commit":
            started = [t for _, t in sorted(job.tasks.items()) if t.started]
            if started:
                job.commit(started[int(step[1]) % len(started)])  # type: ignore[call-overload]
        elif kind == "crash":
            job.restart()
        elif kind == "scale":
            job.scale(int(step[1]), bool(step[2]))  # type: ignore[call-overload]
        elif kind == "split":
            job.split(int(step[1]), float(step[2]))  # type: ignore[call-overload,arg-type]
        else:
            job.merge(int(step[1]))  # type: ignore[call-overload]
        job.tick()
    job.drain()
    job.restart()  # every restore checks the fold again
    totals: Counter[bytes] = Counter()
    for task in job.tasks.values():
        if not job.shards[task.partition].closed:
            totals.update(task.live)
    put = Counter(k for records in job.records.values() for _, k in records)
    assert totals == put


def held(name: str, partition: int, factor: int, bucket: int, version: int) -> HeldState:
    return HeldState(name, f"{version}-0", {"blob": {"state": f"{name}@{version}"}}, version,
                     ((SYSTEM, STREAM, partition, factor, bucket),))


def lineage_of(*shards: Shard) -> Lineage:
    return {(SYSTEM, STREAM): {s.partition: s for s in shards}}


HALF = MAX_HASH_KEY // 2


def test_a_split_childs_state_is_its_range_of_its_parents_final_snapshot() -> None:
    lineage = lineage_of(Shard(0, (), (0, MAX_HASH_KEY), 1, 100),
                         Shard(1, (0,), (0, HALF), 101), Shard(2, (0,), (HALF + 1, MAX_HASH_KEY),
                                                               101))
    parent = held("Partition 0_1_2", 0, 2, 1, version=3)
    low = state_sources(((SYSTEM, STREAM, 1, 2, 1),), [parent], lineage)
    high = state_sources(((SYSTEM, STREAM, 2, 2, 1),), [parent], lineage)
    assert low == (StateSource("Partition 0_1_2", "3-0", parent.markers, 2, (1,), True,
                               (0, HALF)),)
    # null keys go to the child holding the parent's starting hash key: the lower one
    assert high == (StateSource("Partition 0_1_2", "3-0", parent.markers, 2, (1,), False,
                                (HALF + 1, MAX_HASH_KEY)),)
    # once the child committed state of its own, that is all it needs
    own = held("Partition 2_1_2", 2, 2, 1, version=4)
    assert state_sources(((SYSTEM, STREAM, 2, 2, 1),), [parent, own], lineage) == (
        StateSource("Partition 2_1_2", "4-0", own.markers, 2, (1,), True),)


def test_a_merged_child_takes_both_parents_and_a_factor_change_composes() -> None:
    lineage = lineage_of(Shard(1, (), (0, HALF), 1, 50),
                         Shard(2, (), (HALF + 1, MAX_HASH_KEY), 1, 60),
                         Shard(3, (1, 2), (0, MAX_HASH_KEY), 61))
    parents = [held(f"Partition {p}_{b}_2", p, 2, b, version=3) for p in (1, 2) for b in (0, 1)]
    # the factor went 2 -> 1 with the merge: every bucket of both parents
    merged = state_sources(((SYSTEM, STREAM, 3, 1, 0),), parents, lineage)
    assert [(s.task_name, s.factor, s.buckets, s.null_keys) for s in merged] == [
        ("Partition 1_0_2", 2, (0,), True), ("Partition 2_0_2", 2, (0,), False),
        ("Partition 1_1_2", 2, (1,), False), ("Partition 2_1_2", 2, (1,), False)]
    assert {s.hash_key_range for s in merged} == {(0, MAX_HASH_KEY)}
    # and 2 -> 4: one bucket of one parent bucket, of each parent
    finer = state_sources(((SYSTEM, STREAM, 3, 4, 3),), parents, lineage)
    assert [(s.task_name, s.factor, s.buckets) for s in finer] == [
        ("Partition 1_1_2", 4, (3,)), ("Partition 2_1_2", 4, (3,))]


def test_a_parent_that_never_committed_state_is_looked_through() -> None:
    lineage = lineage_of(Shard(0, (), (0, MAX_HASH_KEY), 1, 10),
                         Shard(1, (0,), (0, HALF), 11, 20),
                         Shard(3, (1,), (0, HALF // 2), 21))
    grandparent = held("Partition 0_0_1", 0, 1, 0, version=2)
    sources = state_sources(((SYSTEM, STREAM, 3, 1, 0),), [grandparent], lineage)
    assert sources == (StateSource("Partition 0_0_1", "2-0", grandparent.markers, 1, (0,),
                                   True, (0, HALF // 2)),)
    # an ancestor trimmed from the lineage holds nothing any more
    del lineage[(SYSTEM, STREAM)][0]  # type: ignore[attr-defined]
    assert state_sources(((SYSTEM, STREAM, 3, 1, 0),), [grandparent], lineage) == ()
