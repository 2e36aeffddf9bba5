"""State that splits and merges with the elasticity factor, on a real blob store (a folder
and moto's S3 API server): a split child restores exactly its key bucket of the parent's
snapshot, a merged task the union of its children's, a standby builds the same, and each
new task's first commit uploads a snapshot of its own. The coordinator's ``stateSources``
are given as the data GET /checkpoints would return (``tests/service`` checks those)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from rocksdict import AccessType, Options, Rdict

from grouping.key_bucket import key_bucket
from grouping.key_hash import KeyHash
from worker.state import pending_cut
from worker.state.blobs import BlobStore, open_blob_store
from worker.state.compose import compose
from worker.state.keys import kept_ranges
from worker.state.restore import RestoreResult
from worker.state.snapshot import Digests, snapshot_dir, task_dir
from worker.state.store import TaskStore
from worker.state.tasks import StateConfig, TaskStates

KEYS = [f"customer-{i}".encode() for i in range(300)]


def offsets(bucket: int, n: int) -> list[dict[str, Any]]:
    return [{"ssp": {"system": "kafka", "stream": "orders", "partition": 0,
                     "keyBucket": bucket}, "offset": str(n)}]


def run_batch(states: TaskStates, task: str, checkpoint_id: str, keys: list[bytes | None],
              offset: int, bucket: int) -> dict[str, Any]:
    """One batch of the counting app on ``task``'s live store (restored before),
    committed; returns the task's checkpoint as a stateSources entry would name it."""
    with TaskStore(task_dir(states.state_dir, task) / "live") as store:
        for k in keys:
            store.set(k, "count", store.get(k, "count", 0) + 1)
        store.commit()
        store.snapshot(snapshot_dir(states.state_dir, task, checkpoint_id))
    body = states.back_up(checkpoint_id, {task: {"inputOffsets": offsets(bucket, offset)}})
    states.committed(body)
    return {"taskName": task, "checkpointId": body[task]["checkpointId"],
            "stateCheckpointMarkers": body[task]["stateCheckpointMarkers"]}


def counts(states: TaskStates, task: str) -> dict[bytes | None, int]:
    with TaskStore(task_dir(states.state_dir, task) / "live") as store:
        return {store.split_key(k)[0]: int(v[1:]) for k, v in store.entries()}


def source(held: dict[str, Any], factor: int, buckets: list[int], nulls: bool,
           key_hash: KeyHash | None) -> dict[str, Any]:
    """A ``stateSources`` entry; ``key_hash`` None: as a coordinator before keyHash sent
    it (crc32)."""
    found = {**held, "elasticityFactor": factor, "keyBuckets": buckets, "nullKeys": nulls}
    return found if key_hash is None else {**found, "keyHash": key_hash.value}


def _eventually(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not within the time given"
        time.sleep(0.01)


def _composed_snapshot(states: TaskStates, task: str) -> Path:
    """A split child's composed snapshot, once linked (after the child starts)."""
    root = task_dir(states.state_dir, task) / "snapshots"
    found: list[Path] = []

    def linked() -> bool:
        found[:] = [p for p in root.iterdir() if p.is_dir() and "." not in p.name]
        return bool(found)

    _eventually(linked)
    return found[0]


@pytest.mark.parametrize("key_hash", [None, KeyHash.XXHASH64], ids=["legacy-crc32", "xxhash64"])
def test_state_splits_and_merges_by_key_bucket(blob_store_url: tuple[str, str | None],
                                                tmp_path: Path, key_hash: KeyHash | None
                                                ) -> None:
    kh = key_hash or KeyHash.CRC32
    url, endpoint = blob_store_url
    a = TaskStates(StateConfig(tmp_path / "a", url, endpoint))
    b = TaskStates(StateConfig(tmp_path / "b", url, endpoint))
    a.restore({"P": {"stateSources": []}})
    parent = run_batch(a, "P", "1000-1", [*KEYS, *KEYS[:100], None], 401, 0)
    everything = counts(a, "P")
    assert everything[KEYS[0]] == 2 and everything[None] == 1

    # split 1 -> 2: each child keeps its bucket of the parent's snapshot
    children = {c: {"inputOffsets": offsets(c, 401),
                 "stateSources": [source(parent, 2, [c], c == 0, key_hash)]} for c in (0, 1)}
    b.restore({f"C{c}": children[c] for c in (0, 1)})
    for c in (0, 1):
        got = counts(b, f"C{c}")
        assert got == {k: n for k, n in everything.items()
                       if (k is None and c == 0)
                       or (k is not None and key_bucket(k, 0, 2, kh) == c)}
        assert b.restores[f"C{c}"]["source"] == "composed"
        assert b.restores[f"C{c}"]["from"] == ["P"]
    # the source's copy goes, once the children's snapshots (linked after they start)
    # no longer need it
    _eventually(lambda: not task_dir(tmp_path / "b", "P").exists())
    # each child's first commit uploads a snapshot of its own, even with no new record
    body = b.back_up("9999999999999-0", {"C1": {"inputOffsets": offsets(1, 401)}})
    assert body["C1"]["stateCheckpointMarkers"]["blob"]["state"].startswith("indexes/C1/")
    b.committed(body)
    c1 = {"taskName": "C1", "checkpointId": body["C1"]["checkpointId"],
          "stateCheckpointMarkers": body["C1"]["stateCheckpointMarkers"]}
    c0 = run_batch(b, "C0", "9999999999999-1",
                   [k for k in KEYS if key_bucket(k, 0, 2, kh) == 0], 500, 0)

    # a standby of a task with no snapshot of its own yet builds it by the same rule
    merged_cp = {"inputOffsets": offsets(-1, 401), "checkpointId": None,
                 "stateSources": [source(c0, 2, [0], True, key_hash),
                                  source(c1, 2, [1], False, key_hash)]}
    standby = TaskStates(StateConfig(tmp_path / "s", url, endpoint))
    lags = standby.refresh([], ["M"], lambda names: {"M": merged_cp})
    assert lags == {"M": 0}

    # merge 2 -> 1: the union of the children's snapshots
    a.restore({"M": merged_cp})
    merged = counts(a, "M")
    expected = {k: n + (1 if k is not None and key_bucket(k, 0, 2, kh) == 0 else 0)
                for k, n in everything.items()}
    assert merged == expected
    standby.restore({"M": merged_cp})  # promoted: the same state
    assert counts(standby, "M") == expected


def _level0_files(store_dir: Path) -> int:
    """Level-0 files of the store's root instance, read-only (an open that never
    compacts)."""
    db = Rdict(str(store_dir), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        return int(db.property_int_value("rocksdb.num-files-at-level0") or 0)
    finally:
        db.close()


def test_a_split_and_a_merge_leave_their_compactions_to_the_tasks_first_batch(
        tmp_path: Path) -> None:
    """A composition's stores open with compactions off: the parent's owed level-0 files
    (6, the trigger is 4) are still there in each child's composed store, so composing
    waited for no compaction on the pause's path; each child's first batch compacts
    them, and the counts stay exact through the split and the merge."""
    states = TaskStates(StateConfig(tmp_path / "a", f"file://{tmp_path / 'blobs'}", None))
    states.restore({"P": {"stateSources": []}})
    live = task_dir(states.state_dir, "P") / "live"
    # a batch whose compactions never ran (as a close cut short by its limit leaves):
    # six flushed level-0 files in its snapshot
    with TaskStore(live, KeyHash.XXHASH64, compact=False) as store:
        for i in range(6):
            for k in KEYS[i * 50:(i + 1) * 50]:
                store.set(k, "count", 1)
            store.commit()
        store.snapshot(snapshot_dir(states.state_dir, "P", "1000-1"))
    assert _level0_files(live) == 6
    body = states.back_up("1000-1", {"P": {"inputOffsets": offsets(0, 300)}})
    states.committed(body)
    parent = {"taskName": "P", "checkpointId": body["P"]["checkpointId"],
              "stateCheckpointMarkers": body["P"]["stateCheckpointMarkers"]}
    children = {f"C{c}": {"inputOffsets": offsets(c, 300), "stateSources": [
        source(parent, 2, [c], c == 0, KeyHash.XXHASH64)]} for c in (0, 1)}
    states.restore(children)
    for c in (0, 1):
        assert _level0_files(task_dir(states.state_dir, f"C{c}") / "live") >= 6
    held = {c: run_batch(states, f"C{c}", f"1001-{c}", [], 300, c) for c in (0, 1)}
    for c in (0, 1):
        assert _level0_files(task_dir(states.state_dir, f"C{c}") / "live") < 4
    states.restore({"M": {"inputOffsets": offsets(-1, 300), "stateSources": [
        source(held[c], 2, [c], c == 0, KeyHash.XXHASH64) for c in (0, 1)]}})
    assert counts(states, "M") == dict.fromkeys(KEYS, 1)


class _CountingGets:
    """A real blob store that counts the snapshot indexes read from it."""

    def __init__(self, inner: BlobStore) -> None:
        self.inner = inner
        self.index_gets = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get(self, key: str) -> bytes:
        self.index_gets += key.startswith("indexes/")
        return self.inner.get(key)


def test_a_splits_children_make_their_parents_snapshot_present_once(tmp_path: Path) -> None:
    """Both children of a split are built from one parent snapshot: one restore() checks
    and indexes it once (at 4 GB, a walk of ~1 000 files a child saved), the second child
    downloads nothing; a source made present earlier but gone since (removed meanwhile)
    is made present again, not taken for there."""
    url = f"file://{tmp_path / 'blobs'}"
    a = TaskStates(StateConfig(tmp_path / "a", url, None))
    a.restore({"P": {"stateSources": []}})
    parent = run_batch(a, "P", "1000-1", [*KEYS], 300, 0)
    everything = counts(a, "P")
    counting = _CountingGets(open_blob_store(url))
    b = TaskStates(StateConfig(tmp_path / "b", url, None), counting)
    children = {f"C{c}": {"inputOffsets": offsets(c, 300), "stateSources": [
        source(parent, 2, [c], c == 0, KeyHash.XXHASH64)]} for c in (0, 1)}
    b.restore(children)
    assert counting.index_gets == 1
    assert b.restores["C0"]["bytes"] > 0 and b.restores["C1"]["bytes"] == 0
    for c in (0, 1):
        assert counts(b, f"C{c}") == {
            k: n for k, n in everything.items()
            if (k is None and c == 0)
            or (k is not None and key_bucket(k, 0, 2, KeyHash.XXHASH64) == c)}

    # a remembered source whose folder is gone is restored again
    present: dict[str, RestoreResult] = {}
    spec = children["C1"]["stateSources"]
    into = tmp_path / "c" / "C1" / "live"
    first = compose(tmp_path / "c", "C1", spec, counting, Digests(), into, None, present)
    assert first.downloaded_files > 0 and len(present) == 1
    shutil.rmtree(next(iter(present.values())).folder)
    again = compose(tmp_path / "c", "C1", spec, counting, Digests(), into, None, present)
    assert again.downloaded_files == first.downloaded_files
    with TaskStore(into) as store:
        assert {store.split_key(k)[0] for k, _ in store.entries()} == {
            k for k in KEYS if key_bucket(k, 0, 2, KeyHash.XXHASH64) == 1}


def _in_bucket(everything: dict[bytes | None, int], bucket: int, factor: int,
               nulls: bool) -> dict[bytes | None, int]:
    return {k: n for k, n in everything.items() if (k is None and nulls) or (
        k is not None and key_bucket(k, 0, factor, KeyHash.XXHASH64) == bucket)}


def test_a_split_child_is_its_parents_files_with_the_cut_recorded_and_applied_at_open(
        tmp_path: Path) -> None:
    """A factor split's child is composed without opening a store: its parent's files
    linked, in the live store and the snapshot, with the ranges it keeps recorded beside
    them (``pending_cut``); the store applies the cut at its first open and forgets it.
    The snapshot carries the record to the blob store: restored on another host, the
    child has exactly its bucket, and so does a child of it split again before it wrote
    anything (both cuts recorded: it keeps what both keep)."""
    url = f"file://{tmp_path / 'blobs'}"
    a = TaskStates(StateConfig(tmp_path / "a", url, None))
    a.restore({"P": {"stateSources": []}})
    parent = run_batch(a, "P", "1000-1", [*KEYS, None], 300, 0)
    everything = counts(a, "P")
    a.restore({f"C{c}": {"inputOffsets": offsets(c, 300), "stateSources": [
        source(parent, 2, [c], c == 0, KeyHash.XXHASH64)]} for c in (0, 1)})
    for c in (0, 1):
        live = task_dir(a.state_dir, f"C{c}") / "live"
        composed = _composed_snapshot(a, f"C{c}")
        kept = kept_ranges({c}, 2, c == 0)
        assert pending_cut.pending(live) == kept and pending_cut.pending(composed) == kept
        assert a.restores[f"C{c}"]["linked"] == "P"

    # C1's first commit (no record of its own since the split) names the composed
    # snapshot, the recorded cut with it; another host restores C1 from it
    body = a.back_up("9999999999999-0", {"C1": {"inputOffsets": offsets(1, 300)}})
    a.committed(body)
    c1 = {"taskName": "C1", "checkpointId": body["C1"]["checkpointId"],
          "stateCheckpointMarkers": body["C1"]["stateCheckpointMarkers"]}
    b = TaskStates(StateConfig(tmp_path / "b", url, None))
    b.restore({"C1": {"inputOffsets": offsets(1, 300), "stateSources": [
        source(c1, 2, [1], False, KeyHash.XXHASH64)]}})
    assert counts(b, "C1") == _in_bucket(everything, 1, 2, False)
    assert pending_cut.pending(task_dir(b.state_dir, "C1") / "live") is None  # applied

    # C1 splits again (factor 4: buckets 1 and 3) before it wrote anything
    b.restore({f"G{g}": {"inputOffsets": offsets(g, 300), "stateSources": [
        source(c1, 4, [g], False, KeyHash.XXHASH64)]} for g in (1, 3)})
    for g in (1, 3):
        assert counts(b, f"G{g}") == _in_bucket(everything, g, 4, False)

    # on the first host, the live store opened applies the cut and forgets it
    assert counts(a, "C0") == _in_bucket(everything, 0, 2, True)
    assert pending_cut.pending(task_dir(a.state_dir, "C0") / "live") is None


def test_a_merge_of_children_whose_cuts_are_still_recorded_is_exact(tmp_path: Path) -> None:
    """Neither child wrote anything between the split and the merge: their snapshots
    are the parent's files with their cuts recorded. The merge links one as its base and
    the other as a part, and holds every key of the parent once."""
    url = f"file://{tmp_path / 'blobs'}"
    a = TaskStates(StateConfig(tmp_path / "a", url, None))
    a.restore({"P": {"stateSources": []}})
    parent = run_batch(a, "P", "1000-1", [*KEYS, *KEYS[:50], None], 300, 0)
    everything = counts(a, "P")
    a.restore({f"C{c}": {"inputOffsets": offsets(c, 300), "stateSources": [
        source(parent, 2, [c], c == 0, KeyHash.XXHASH64)]} for c in (0, 1)})
    body = a.back_up("9999999999999-0", {f"C{c}": {"inputOffsets": offsets(c, 300)}
                                         for c in (0, 1)})
    a.committed(body)
    held = {c: {"taskName": f"C{c}", "checkpointId": body[f"C{c}"]["checkpointId"],
                "stateCheckpointMarkers": body[f"C{c}"]["stateCheckpointMarkers"]}
            for c in (0, 1)}
    for host in ("a", "m"):  # the children's host, and a host with nothing
        states = a if host == "a" else TaskStates(StateConfig(tmp_path / host, url, None))
        states.restore({"M": {"inputOffsets": offsets(-1, 300), "stateSources": [
            source(held[0], 2, [0], True, KeyHash.XXHASH64),
            source(held[1], 2, [1], False, KeyHash.XXHASH64)]}})
        assert counts(states, "M") == everything
        assert states.restores["M"]["copied"] == 0


def test_a_recorded_cut_applied_again_after_a_crash_changes_nothing(tmp_path: Path) -> None:
    """A crash between a store's applying its recorded cut and forgetting it leaves the
    record: the next open applies it again, which deletes nothing more."""
    live = tmp_path / "live"
    with TaskStore(live, KeyHash.XXHASH64) as store:
        for k in KEYS:
            store.set(k, "count", 1)
        store.commit()
    kept = kept_ranges({1}, 2, False)
    pending_cut.record(live, kept)
    with TaskStore(live, KeyHash.XXHASH64) as store:
        first = {store.split_key(k)[0] for k, _ in store.entries()}
        store.set(KEYS[0], "count", 5)  # (whatever its bucket: the task's own write)
        store.commit()
    assert first == {k for k in KEYS if key_bucket(k, 0, 2, KeyHash.XXHASH64) == 1}
    pending_cut.record(live, kept)  # as if the record had never been removed
    with TaskStore(live, KeyHash.XXHASH64) as store:
        again = {store.split_key(k)[0] for k, _ in store.entries()}
    expected = first | ({KEYS[0]} if key_bucket(KEYS[0], 0, 2, KeyHash.XXHASH64) == 1
                        else set())
    assert again == expected


def _of_bucket(bucket: int, keys: Sequence[bytes | None]) -> list[bytes | None]:
    """The keys a task of factor 2 reads: its bucket's (the null key: bucket 0's)."""
    return [k for k in keys if (k is None and bucket == 0) or (
        k is not None and key_bucket(k, 0, 2, KeyHash.XXHASH64) == bucket)]


def _split_and_run(state_dir: Path, url: str, keys: Sequence[bytes | None], offset: int
                   ) -> tuple[TaskStates, dict[int, dict[str, Any]]]:
    """P counts every key once and splits into C0 and C1, which count their buckets'
    ``keys`` once more: the children's checkpoints, by bucket."""
    a = TaskStates(StateConfig(state_dir, url, None))
    a.restore({"P": {"stateSources": []}})
    parent = run_batch(a, "P", "1000-1", [*KEYS, None], 300, 0)
    a.restore({f"C{c}": {"inputOffsets": offsets(c, 300), "stateSources": [
        source(parent, 2, [c], c == 0, KeyHash.XXHASH64)]} for c in (0, 1)})
    return a, {c: run_batch(a, f"C{c}", f"1001-{c}", _of_bucket(c, keys), offset, c)
               for c in (0, 1)}


def test_a_merged_task_is_its_childrens_files_with_the_parts_recorded_and_applied_at_open(
        tmp_path: Path) -> None:
    """A factor merge's task is composed without opening a store: its first child's files
    linked as the root, its second's inside it, with the root's cut and the part's ranges
    recorded beside them (``pending_cut``), in the live store and the snapshot; the
    store makes them its parts at its first open and forgets the records. The snapshot
    carries them to the blob store: restored on another host, the merged task has
    every key once, and so do its children when it splits again before it wrote
    anything (a store whose parts are still recorded is opened to be cut, never linked
    without its parts)."""
    url = f"file://{tmp_path / 'blobs'}"
    a, held = _split_and_run(tmp_path / "a", url, [*KEYS[:40], None], 340)
    everything = {**counts(a, "C0"), **counts(a, "C1")}
    assert everything[KEYS[0]] == 2 and everything[None] == 2
    a.restore({"M": {"inputOffsets": offsets(-1, 340), "stateSources": [
        source(held[c], 2, [c], c == 0, KeyHash.XXHASH64) for c in (0, 1)]}})
    assert (a.restores["M"]["linked"], a.restores["M"]["parts"],
            a.restores["M"]["copied"]) == ("C0", ["C1"], 0)
    live = task_dir(a.state_dir, "M") / "live"
    composed = _composed_snapshot(a, "M")
    for folder in (live, composed):
        assert pending_cut.pending(folder) == kept_ranges({0}, 2, True)
        recorded = pending_cut.pending_parts(folder)
        assert recorded is not None and [(p.folder, list(p.ranges)) for p in recorded] == [
            ("part-1", kept_ranges({1}, 2, False))]
        assert (folder / "part-1" / "CURRENT").is_file()

    # M's first commit (it wrote nothing) names the composed snapshot, records and all
    body = a.back_up("9999999999999-0", {"M": {"inputOffsets": offsets(-1, 340)}})
    a.committed(body)
    m = {"taskName": "M", "checkpointId": body["M"]["checkpointId"],
         "stateCheckpointMarkers": body["M"]["stateCheckpointMarkers"]}
    b = TaskStates(StateConfig(tmp_path / "b", url, None))
    b.restore({"M": {"inputOffsets": offsets(-1, 340), "stateSources": [
        source(m, 1, [0], True, KeyHash.XXHASH64)]}})
    assert counts(b, "M") == everything
    b_live = task_dir(b.state_dir, "M") / "live"
    assert pending_cut.pending_parts(b_live) is None and pending_cut.pending(b_live) is None
    with TaskStore(b_live) as store:
        assert store.parts == 2

    # M splits again before it wrote anything: from the snapshot with its records
    b.restore({f"G{g}": {"inputOffsets": offsets(g, 340), "stateSources": [
        source(m, 2, [g], g == 0, KeyHash.XXHASH64)]} for g in (0, 1)})
    for g in (0, 1):
        assert counts(b, f"G{g}") == _in_bucket(everything, g, 2, g == 0)

    # on the first host, the live store opened makes its parts and forgets the records
    assert counts(a, "M") == everything
    assert pending_cut.pending_parts(live) is None and pending_cut.pending(live) is None
    assert not (live / "part-1" / pending_cut.CUT_FILE).exists()


def test_recorded_parts_made_again_after_a_crash_change_nothing(tmp_path: Path) -> None:
    """A crash between a store's making its recorded parts its own and forgetting the
    record leaves the record: the next open makes the same parts again (their ranges
    deleted again, nothing more), and the counts stay."""
    a, held = _split_and_run(tmp_path / "a", f"file://{tmp_path / 'blobs'}", KEYS[:10], 310)
    a.restore({"M": {"inputOffsets": offsets(-1, 310), "stateSources": [
        source(held[c], 2, [c], c == 0, KeyHash.XXHASH64) for c in (0, 1)]}})
    live = task_dir(a.state_dir, "M") / "live"
    recorded = pending_cut.pending_parts(live)
    assert recorded is not None
    first = counts(a, "M")
    pending_cut.record_parts(live, recorded)  # as if the record had never been removed
    assert counts(a, "M") == first
    with TaskStore(live) as store:
        assert store.parts == 2
        store.set(KEYS[0], "count", 7)
        store.set(KEYS[1], "count", 8)
        store.commit()
    assert counts(a, "M") == {**first, KEYS[0]: 7, KEYS[1]: 8}
