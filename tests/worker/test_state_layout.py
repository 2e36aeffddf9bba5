"""State across splits and merges on real RocksDB stores in the bucket-ordered layout
(``worker.state.keys``): random puts, splits and merges, a job that starts from a store
written in the legacy layout or not. Every task that starts holds, for each key in its
key bucket, exactly the key's count, and nothing else; a split of a bucket-ordered store
copies no entry (hard links and range deletions), a legacy one is rewritten once."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict

from grouping.key_bucket import key_bucket
from grouping.key_hash import KeyHash
from grouping.shards import MAX_HASH_KEY, hash_key
from worker.state.keys import LEGACY
from worker.state.snapshot import snapshot_dir, task_dir
from worker.state.store import TaskStore
from worker.state.tasks import StateConfig, TaskStates

KEY_HASH = KeyHash.XXHASH64
KEYS: list[bytes | None] = [None, b"", *(f"user-{i}".encode() for i in range(40))]


@dataclass
class Task:
    """A task of the model: its key bucket, and what its last commit's snapshot is."""

    factor: int
    bucket: int
    held: dict[str, Any]

    def owns(self, key: bytes | None) -> bool:
        if key is None:
            return self.bucket == 0  # the null keys go with bucket 0 here
        return key_bucket(key, 0, self.factor, KEY_HASH) == self.bucket


class Job:
    """Tasks on one processor's state dir, and the counts every key should have."""

    def __init__(self, root: Path, legacy_start: bool) -> None:
        self.root = root
        self.states = TaskStates(StateConfig(root / "state", (root / "blobs").as_uri(), None))
        self.counts: Counter[bytes | None] = Counter()
        self.batches = 0
        # (task, split of a legacy store (None: a merge), linked source, entries copied,
        # bytes its first backup sent)
        self.cuts: list[tuple[str, bool | None, str | None, int, int]] = []
        self.started = 0
        self.legacy_start = legacy_start
        self.sizes: dict[str, int] = {}  # task -> bytes of its last snapshot
        self.states.restore({"T": {"stateSources": []}})
        if legacy_start:  # the first release's encoding, no layout entry
            db = Rdict(str(task_dir(self.states.state_dir, "T") / "live"),
                       Options(raw_mode=True))
            db[LEGACY.entry_key(b"user-0", "n")] = b"J1"
            db.close()
        self.tasks = {"T": Task(1, 0, self.commit("T", []))}

    def commit(self, name: str, keys: Sequence[bytes | None]) -> dict[str, Any]:
        """One batch of counting on ``name``'s live store, snapshotted and backed up."""
        self.batches += 1
        checkpoint_id = f"{1000 + self.batches}-0"
        with TaskStore(task_dir(self.states.state_dir, name) / "live", KEY_HASH) as store:
            for k in keys:
                store.set(k, "n", store.get(k, "n", 0) + 1)
            store.commit()
            store.compact_dropped(1)  # a file a batch: cuts compacted across batches
            store.snapshot(snapshot_dir(self.states.state_dir, name, checkpoint_id))
        body = self.states.back_up(checkpoint_id, {name: {"inputOffsets": []}})
        self.states.committed(body)
        self.sizes[name] = sum(f.stat().st_size for f in snapshot_dir(
            self.states.state_dir, name, checkpoint_id).rglob("*") if f.is_file())
        self.counts.update(keys)
        return {"taskName": name, "checkpointId": body[name]["checkpointId"],
                "stateCheckpointMarkers": body[name]["stateCheckpointMarkers"]}

    def put(self, keys: list[bytes | None]) -> None:
        for name, task in list(self.tasks.items()):
            mine = [k for k in keys if task.owns(k)]
            if mine:
                task.held = self.commit(name, mine)

    def start(self, factor: int, bucket: int, sources: list[dict[str, Any]],
              split_of_legacy: bool | None) -> str:
        """A new task composed from ``sources`` (``split_of_legacy``: None for a merge,
        else whether the parent's store is the legacy one); checks its state at once."""
        self.started += 1
        name = f"t{self.started}-{bucket}of{factor}"
        self.states.restore({name: {"stateSources": sources}})
        task = Task(factor, bucket, {})
        self.check(name, task)
        restored = self.states.restores[name]
        task.held = self.commit(name, [])
        self.cuts.append((name, split_of_legacy, restored["linked"],
                          int(restored["copied"]), self.states.uploaded[name]))
        self.tasks[name] = task
        return name

    def split(self, pick: int) -> None:
        name = sorted(self.tasks)[pick % len(self.tasks)]
        parent = self.tasks.pop(name)
        if parent.factor >= 64:
            self.tasks[name] = parent
            return
        factor = 2 * parent.factor
        for bucket in (parent.bucket, parent.bucket + parent.factor):
            self.start(factor, bucket, [source(parent.held, factor, bucket, bucket == 0)],
                       split_of_legacy=name == "T" and self.legacy_start)

    def merge(self, pick: int) -> None:
        pairs = [(a, b) for a, ta in self.tasks.items() for b, tb in self.tasks.items()
                 if ta.factor == tb.factor and ta.factor > 1
                 and tb.bucket == ta.bucket + ta.factor // 2]
        if not pairs:
            return
        a, b = sorted(pairs)[pick % len(pairs)]
        low, high = self.tasks.pop(a), self.tasks.pop(b)
        self.start(low.factor // 2, low.bucket, [
            source(low.held, low.factor, low.bucket, low.bucket == 0),
            source(high.held, high.factor, high.bucket, False)], split_of_legacy=None)

    def check(self, name: str, task: Task, state_dir: Path | None = None) -> None:
        with TaskStore(task_dir(state_dir or self.states.state_dir, name) / "live",
                       KEY_HASH) as store:
            got = {store.split_key(k)[0]: v for k, v in store.entries()}
            # a composed store is always bucket-ordered (a legacy one converted)
            assert store.bucket_ordered or name == "T"
        expected = {k: n for k, n in self.counts.items() if n and task.owns(k)}
        assert {k: int(v[1:]) for k, v in got.items()} == expected, name


    def check_elsewhere(self, name: str, task: Task) -> None:
        """``name`` restored from its last backup into another processor's state dir."""
        other = TaskStates(StateConfig(self.root / "elsewhere", (self.root / "blobs").as_uri(),
                                       None))
        try:
            other.restore({name: {"stateSources": [task.held]}})
            assert other.restores[name]["source"] in ("remote", "partial")
            self.check(name, task, other.state_dir)
        finally:
            shutil.rmtree(other.state_dir, ignore_errors=True)


def source(held: dict[str, Any], factor: int, bucket: int, null_keys: bool
           ) -> dict[str, Any]:
    return {**held, "elasticityFactor": factor, "keyBuckets": [bucket],
            "nullKeys": null_keys, "keyHash": KEY_HASH.value}


ops = st.lists(st.one_of(
    st.tuples(st.just("put"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=30)),
    st.tuples(st.just("split"), st.integers(0, 16)),
    st.tuples(st.just("merge"), st.integers(0, 16)),
), min_size=1, max_size=10)


@settings(max_examples=25, deadline=None)
@given(st.booleans(), ops)
def test_every_key_is_exactly_where_its_bucket_is_across_splits_and_merges(
        legacy_start: bool, steps: list[tuple[Any, ...]]) -> None:
    root = Path(tempfile.mkdtemp())
    try:
        job = Job(root, legacy_start)
        job.counts[b"user-0"] += 1 if legacy_start else 0
        for kind, arg in steps:
            if kind == "put":
                job.put(arg)
            elif kind == "split":
                job.split(arg)
            else:
                job.merge(arg)
        for name, task in job.tasks.items():
            job.check(name, task)
        # a split of a bucket-ordered store links its parent and copies nothing, and so
        # does a merge (its sources are split children: bucket-ordered)
        for name, of_legacy, linked, copied, _ in job.cuts:
            if of_legacy is not True:
                assert linked is not None and copied == 0, (name, linked, copied)
        # and every task's state is whole when restored from its backup on a new host
        if job.tasks:
            name, task = sorted(job.tasks.items())[-1]
            job.check_elsewhere(name, task)
    finally:
        shutil.rmtree(root)


def test_a_split_childs_first_backup_sends_only_what_its_cut_wrote(tmp_path: Path) -> None:
    job = Job(tmp_path, legacy_start=False)
    job.tasks["T"].held = job.commit("T", [os.urandom(100) for _ in range(20_000)])
    assert job.sizes["T"] > 1_000_000
    job.split(0)
    for name, _, linked, copied, sent in job.cuts:
        assert (linked, copied) == ("T", 0)
        assert sent < job.sizes["T"] / 20, (name, sent)  # its SST files are the parent's


def test_a_kinesis_child_keeps_its_hash_key_range_of_a_linked_parent(tmp_path: Path) -> None:
    """A shard split's child: the parent's store linked, cut to the child's key bucket by
    range, then to its MD5 hash-key range entry by entry (not a range of the layout)."""
    job = Job(tmp_path, legacy_start=False)
    keys = [k for k in KEYS if k is not None]
    job.tasks["T"].held = job.commit("T", keys)
    half = MAX_HASH_KEY // 2
    for name, (low, high) in {"low": (0, half), "high": (half + 1, MAX_HASH_KEY)}.items():
        job.states.restore({name: {"stateSources": [{
            **source(job.tasks["T"].held, 2, 1, False), "hashKeyRange": [low, high]}]}})
        with TaskStore(task_dir(job.states.state_dir, name) / "live", KEY_HASH) as store:
            got = {store.split_key(k)[0] for k, _ in store.entries()}
        assert got == {k for k in keys if key_bucket(k, 0, 2, KEY_HASH) == 1
                       and low <= hash_key(k) <= high}
        assert job.states.restores[name]["linked"] == "T"


def test_a_cuts_dropped_files_are_compacted_away_a_slice_a_batch(tmp_path: Path) -> None:
    job = Job(tmp_path, legacy_start=False)
    keys = [os.urandom(100) for _ in range(20_000)]
    job.tasks["T"].held = job.commit("T", keys)
    job.split(0)
    child = task_dir(job.states.state_dir, job.cuts[1][0]) / "live"
    with TaskStore(child, KEY_HASH) as store:
        before = sum(f.stat().st_size for f in child.glob("*.sst"))
        assert before >= job.sizes["T"] * 0.9  # the parent's files, cut by a range
        rounds = 0
        while store.compact_dropped(64 * 1024):
            rounds += 1
        assert rounds >= 1 and store.compact_dropped(64 * 1024) == 0
        after = sum(f.stat().st_size for f in child.glob("*.sst"))
        assert after < before * 0.7, (before, after)
        mine = {k for k in keys if key_bucket(k, 0, 2, KEY_HASH) == 1}
        assert {store.split_key(k)[0] for k, _ in store.entries()} == mine
