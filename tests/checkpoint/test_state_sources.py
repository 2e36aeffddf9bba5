"""The state of a task across splits and merges (pure): a model of a partition, per-key
counting folds, checkpoints resolved by DESIGN.md's rule and state restored from the
snapshots ``state_sources`` picks. Through random sequences of batches, commits,
crashes and factor changes, a restored task's state is always the fold of exactly the
records below where it starts (skip watermarks included), and after a drain every key's
count is its number of records: none counted twice, none missing. Zombies -- the tasks
of the version before, still running after a scale -- may commit late, as a paused
worker's commit that passed the fence just before its tasks moved may reach the store
after the new owners started: a restore must still pair the start with its state."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint.commit import EntryKey
from checkpoint.model import BucketKey, ResetPolicy
from checkpoint.resolution import resolve_ssp_start
from checkpoint.state_sources import HeldState, StateSource, state_sources
from grouping.key_bucket import key_bucket
from grouping.key_hash import DEFAULT_KEY_HASH
from grouping.model import SystemStreamPartition

SSP = SystemStreamPartition("kafka", "orders", 0)
KEYS = [f"customer-{i}".encode() for i in range(12)]


def spaces(factor: int, bucket: int) -> tuple[EntryKey, ...]:
    k = BucketKey.of_ssp(SystemStreamPartition("kafka", "orders", 0, bucket), factor)
    return ((k.ssp.system, k.ssp.stream, k.ssp.partition, k.factor, k.bucket),)


@dataclass
class Task:
    bucket: int
    factor: int
    version: int
    position: int = 0
    skip: tuple[tuple[int, int, int], ...] = ()  # (factor, bucket, offset)
    live: Counter[bytes] = field(default_factory=Counter)
    touched: bool = False  # state changed since the last snapshot committed


@dataclass
class Job:
    """One partition; the real resolution and state rules; an in-memory blob store."""

    records: list[bytes]
    factor: int = 1
    version: int = 1
    entries: dict[tuple[int, int], int] = field(default_factory=dict)
    held: dict[str, HeldState] = field(default_factory=dict)
    snapshots: dict[str, Counter[bytes]] = field(default_factory=dict)
    tasks: dict[int, Task] = field(default_factory=dict)
    zombies: list[Task] = field(default_factory=list)  # the previous version's tasks
    ids: int = 0

    def name(self, bucket: int, factor: int | None = None) -> str:
        return f"Partition 0_{bucket}_{factor or self.factor}"

    def start_all(self) -> None:
        self.tasks = {b: self.restore(b) for b in range(self.factor)}

    def restore(self, bucket: int) -> Task:
        start = resolve_ssp_start(SystemStreamPartition("kafka", "orders", 0, bucket),
                                  self.factor, self.entries, ResetPolicy.EARLIEST)
        first = 0 if isinstance(start.start, ResetPolicy) else start.start
        skip = tuple((w.factor, w.bucket, int(w.offset)) for w in start.skip_below)
        held = [replace(h, offsets={k: self.entries[(k[3], k[4])] for k in h.key_spaces
                                    if (k[3], k[4]) in self.entries})
                for h in self.held.values()]  # as GET /checkpoints ranks them
        sources = state_sources(spaces(self.factor, bucket), held)
        live: Counter[bytes] = Counter()
        for source in sources:
            snapshot = self.snapshots[source.markers["blob"]["state"]]
            for key, count in snapshot.items():
                if key_bucket(key, 0, source.factor, DEFAULT_KEY_HASH) in source.buckets:
                    assert key not in live  # the sources are disjoint
                    live[key] = count
        # as the worker does: state composed from other snapshots is snapshotted at once
        own = len(sources) == 1 and sources[0].task_name == self.name(bucket)
        task = Task(bucket, self.factor, self.version, first, skip, live,
                    touched=bool(sources) and not own)
        self.check(task)
        return task

    def skipped(self, task: Task, offset: int, key: bytes) -> bool:
        return any(key_bucket(key, offset, f, DEFAULT_KEY_HASH) == b and offset < w
                   for f, b, w in task.skip)

    def check(self, task: Task) -> None:
        """The task's state is the fold of exactly the records below where it starts."""
        for key in KEYS:
            if key_bucket(key, 0, self.factor, DEFAULT_KEY_HASH) != task.bucket:
                continue
            below = sum(1 for o, k in enumerate(self.records[:task.position]) if k == key)
            below += sum(1 for o, k in enumerate(self.records[task.position:], task.position)
                         if k == key and self.skipped(task, o, key))
            assert task.live[key] == below, (key, task, below)

    def process(self, task: Task, n: int) -> None:
        end = min(len(self.records), task.position + n)
        for offset in range(task.position, end):
            key = self.records[offset]
            if key_bucket(key, offset, task.factor, DEFAULT_KEY_HASH) == task.bucket and \
                    not self.skipped(task, offset, key):
                task.live[key] += 1
                task.touched = True
        task.position = end

    def commit(self, task: Task) -> None:
        """As the store writes a commit: the entry never moves back, and the snapshot is
        named only when the entry is then exactly the task's position (at head)."""
        space = (task.factor, task.bucket)
        if task.position > self.entries.get(space, -1):
            self.entries[space] = task.position
        if task.touched and self.entries[space] == task.position:
            self.ids += 1
            name = self.name(task.bucket, task.factor)
            marker = f"{name}/{self.ids}"
            self.snapshots[marker] = Counter(task.live)
            self.held[name] = HeldState(name, str(self.ids), {"blob": {"state": marker}},
                                        task.version, spaces(task.factor, task.bucket))
            task.touched = False

    def scale(self, factor: int, graceful: bool) -> None:
        if graceful:
            for task in self.tasks.values():
                self.commit(task)
        self.zombies = list(self.tasks.values())
        self.factor, self.version = factor, self.version + 1
        self.start_all()


ops = st.lists(st.one_of(
    st.tuples(st.just("process"), st.integers(0, 7), st.integers(1, 12)),
    st.tuples(st.just("commit"), st.integers(0, 7)),
    st.tuples(st.just("crash")),
    st.tuples(st.just("scale"), st.sampled_from([1, 2, 4, 8]), st.booleans()),
    st.tuples(st.just("zombie"), st.integers(0, 7), st.integers(0, 12)),
), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(KEYS), min_size=1, max_size=80), ops)
def test_state_is_the_fold_of_exactly_the_processed_records(
        records: list[bytes], steps: list[tuple[object, ...]]) -> None:
    job = Job(records)
    job.start_all()
    for step in steps:
        if step[0] == "process":
            job.process(job.tasks[int(step[1]) % job.factor],  # type: ignore[call-overload]
                        int(step[2]))  # type: ignore[call-overload]
        elif step[0] == "commit":
            job.commit(job.tasks[int(step[1]) % job.factor])  # type: ignore[call-overload]
        elif step[0] == "zombie":  # a late commit of the version before, maybe further on
            if job.zombies:
                zombie = job.zombies[int(step[1]) % len(job.zombies)]  # type: ignore[call-overload]
                job.process(zombie, int(step[2]))  # type: ignore[call-overload]
                job.commit(zombie)
        elif step[0] == "crash":  # uncommitted work is lost; every task restores
            job.start_all()
        else:
            job.scale(int(step[1]), bool(step[2]))  # type: ignore[call-overload]
    for task in job.tasks.values():  # drain
        job.process(task, len(records))
        job.commit(task)
    job.start_all()  # restores check the fold again
    totals: Counter[bytes] = Counter()
    for task in job.tasks.values():
        totals.update(task.live)
    assert totals == Counter(records)


def held(name: str, factor: int, bucket: int, version: int) -> HeldState:
    return HeldState(name, f"{version}-0", {"blob": {"state": f"{name}@{version}"}}, version,
                     spaces(factor, bucket))


def test_a_split_child_keeps_its_bucket_of_the_parent_and_only_child_b_gets_null_keys(
) -> None:
    parent = held("P0", 2, 1, version=3)
    low = state_sources(spaces(4, 1), [parent])
    high = state_sources(spaces(4, 3), [parent])
    assert low == (StateSource("P0", "3-0", parent.markers, 4, (1,), True),)
    assert high == (StateSource("P0", "3-0", parent.markers, 4, (3,), False),)


def test_a_merge_unions_the_children_and_the_newest_holder_of_each_cell_wins() -> None:
    old_parent = held("P1", 2, 1, version=3)
    children = [held("C1", 4, 1, version=5), held("C3", 4, 3, version=5)]
    merged = state_sources(spaces(2, 1), [old_parent, *children])
    assert [(s.task_name, s.buckets, s.null_keys) for s in merged] == [
        ("C1", (1,), True), ("C3", (3,), False)]
    # one child never committed state: its keys come from the old parent
    partly = state_sources(spaces(2, 1), [old_parent, children[0]])
    assert [(s.task_name, s.buckets) for s in partly] == [("C1", (1,)), ("P1", (3,))]
    # the merged task committed since: its own snapshot holds everything
    own = held("P1", 2, 1, version=7)
    assert state_sources(spaces(2, 1), [own, *children]) == (
        StateSource("P1", "7-0", own.markers, 4, (1, 3), True),)


def test_unrelated_partitions_and_buckets_are_ignored() -> None:
    other = HeldState("X", "1-0", {"blob": {"state": "x"}}, 9,
                      (("kafka", "orders", 1, 2, 1),))
    sibling = held("P0", 2, 0, version=9)
    assert state_sources(spaces(2, 1), [other, sibling]) == ()
