"""A store of several parts (a merge links its second child instead of copying it):
the range algebra and the part map (pure), and merges, backups and restores of such
stores on real RocksDB instances and a folder blob store."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.state.backup import SnapshotIndex
from worker.state.keys import KeyRange, intersect, subtract
from worker.state.parts import Part, PartMap
from worker.state.restore import restore_snapshot
from worker.state.snapshot import Digests, index_path, inventory, snapshot_dir, task_dir
from worker.state.store import TaskStore

from .test_state_layout import KEY_HASH, Job, Task

SPACE = 64  # ranges over one-byte keys 0..63


def _ranges(bounds: list[int]) -> list[KeyRange]:
    cuts = sorted(set(bounds))
    return [KeyRange(bytes([a]), bytes([b])) for a, b in zip(cuts[::2], cuts[1::2],
                                                             strict=False)]


def _points(ranges: list[KeyRange]) -> set[int]:
    return {k for r in ranges for k in range(r.begin[0], r.end[0])}


range_lists = st.lists(st.integers(0, SPACE), max_size=10).map(_ranges)


@settings(max_examples=300)
@given(range_lists, range_lists)
def test_intersect_and_subtract_are_the_set_operations(a: list[KeyRange],
                                                      b: list[KeyRange]) -> None:
    both, rest = intersect(a, b), subtract(a, b)
    assert _points(both) == _points(a) & _points(b)
    assert _points(rest) == _points(a) - _points(b)
    for out in (both, rest):  # sorted, disjoint, none empty
        assert all(r.begin < r.end for r in out)
        assert all(x.end <= y.begin for x, y in pairwise(out))


@settings(max_examples=200)
@given(st.lists(range_lists, max_size=4), st.lists(st.integers(0, SPACE - 1), max_size=20))
def test_a_keys_owner_is_the_part_whose_range_holds_it(owned: list[list[KeyRange]],
                                                       probes: list[int]) -> None:
    parts, taken = [], set[int]()
    for i, ranges in enumerate(owned):
        mine = [r for r in ranges if not _points([r]) & taken]
        taken |= _points(mine)
        parts.append(Part(f"part-{i + 1}", tuple(mine)))
    routes = PartMap.of_json(PartMap(parts).to_json())
    for k in probes:
        expected = next((i for i, p in enumerate(parts) if k in _points(list(p.ranges))), -1)
        assert routes.owner(bytes([k])) == expected


def test_parts_that_overlap_are_refused() -> None:
    with pytest.raises(ValueError, match="overlapping"):
        PartMap([Part("part-1", (KeyRange(b"\x01", b"\x05"),)),
                 Part("part-2", (KeyRange(b"\x04", b"\x09"),))])


def _merged(tmp_path: Path, keys: Sequence[bytes | None], settle: int = 0) -> tuple[Job, str]:
    """T with ``keys`` split to factor 2 and merged back (after ``settle`` empty batches
    of each child): the merged task's name."""
    job = Job(tmp_path, legacy_start=False)
    job.tasks["T"].held = job.commit("T", keys)
    job.split(0)
    for _ in range(settle):
        for name, task in job.tasks.items():
            task.held = job.commit(name, [])
    job.merge(0)
    return job, job.cuts[-1][0]


def test_a_merge_links_both_children_and_its_first_backup_sends_only_the_cuts(
        tmp_path: Path) -> None:
    keys = [os.urandom(100) for _ in range(20_000)]
    # the children's batches compact what their split dropped first (RocksDB rewrites
    # their files then, and a merge right after a split would send those)
    job, merged = _merged(tmp_path, keys, settle=6)
    children = sum(job.sizes[n] for n in job.states.restores[job.cuts[-1][0]]["from"])
    _, of_legacy, linked, copied, sent = job.cuts[-1]
    assert (of_legacy, copied) == (None, 0)
    restored = job.states.restores[merged]
    assert linked == restored["linked"] and len(restored["parts"]) == 1
    assert sent < children / 20, (sent, children)  # the children's files are there
    with TaskStore(task_dir(job.states.state_dir, merged) / "live", KEY_HASH) as store:
        assert store.parts == 2
        assert {store.split_key(k)[0] for k, _ in store.entries()} == set(keys)
        for k in keys[:50]:
            assert store.get(k, "n") == 1
    job.check_elsewhere(merged, job.tasks[merged])


def test_a_parted_store_writes_each_key_to_its_owner_and_splits_back_to_one(
        tmp_path: Path) -> None:
    keys: list[bytes | None] = [os.urandom(20) for _ in range(2_000)]
    job, merged = _merged(tmp_path, keys)
    job.put(keys[:500])  # counts 2 on the merged task's two parts
    job.check(merged, job.tasks[merged])
    job.split(0)  # the merged task: each child keeps one instance's keys
    for name in job.cuts[-2][0], job.cuts[-1][0]:
        job.check(name, job.tasks[name])
        with TaskStore(task_dir(job.states.state_dir, name) / "live", KEY_HASH) as store:
            assert store.parts <= 2
            assert job.states.restores[name]["copied"] == 0


def test_a_restore_of_a_parted_snapshot_cut_short_resumes_with_its_parts_files(
        tmp_path: Path) -> None:
    job, merged = _merged(tmp_path, [os.urandom(50) for _ in range(5_000)])
    marker = job.tasks[merged].held["stateCheckpointMarkers"]["blob"]["state"]
    blobs = job.states._blobs
    elsewhere = tmp_path / "elsewhere"
    first = restore_snapshot(elsewhere, marker, blobs, Digests())
    assert any("/" in name for name in first.index.files)  # a part's files
    # cut short: the snapshot back to staging, one part file lost, a stranger left
    staging = first.folder.with_name(first.folder.name + ".partial")
    first.folder.rename(staging)
    part_file = next(p for p in staging.rglob("*.sst") if p.parent != staging)
    part_file.unlink()
    (part_file.parent / "junk.partial").write_bytes(b"x")
    again = restore_snapshot(elsewhere, marker, blobs, Digests())
    assert again.resumed_files == len(first.index.files) - 1
    assert again.downloaded_files == 1
    assert inventory(again.folder, Digests()) == dict(first.index.files)


def test_an_index_naming_a_file_outside_its_snapshot_is_refused() -> None:
    for name in ("../x.sst", "/etc/passwd", "part-1/../../x", "a//b"):
        raw = json.dumps({"version": 1, "taskName": "t", "checkpointId": "1-0",
                          "createdAt": 0.0, "files": {name: {"size": 1, "sha256": "00"}}})
        with pytest.raises(ValueError, match="outside"):
            SnapshotIndex.from_bytes(raw.encode())


def test_a_snapshot_of_a_parted_store_is_whole_or_absent(tmp_path: Path) -> None:
    """An earlier attempt's staging folder left behind does not leak into the next."""
    job, merged = _merged(tmp_path, [os.urandom(30) for _ in range(1_000)])
    folder = snapshot_dir(job.states.state_dir, merged, "9999-0")
    staging = folder.with_name(folder.name + ".partial")
    (staging / "part-7").mkdir(parents=True)
    with TaskStore(task_dir(job.states.state_dir, merged) / "live", KEY_HASH) as store:
        store.snapshot(folder)
    assert not staging.exists() and not (folder / "part-7").exists()
    assert {p.name for p in folder.iterdir() if p.is_dir()} == {"part-1"}
    shutil.rmtree(folder)


class _CutShort:
    """Fails a merge's file operation number ``steps`` (from 0: linking the first child,
    linking the second as a part, recording the parts) on one of its two copies: the
    live store's (``in_snapshot`` false) or the first snapshot's (linked on a thread of
    its own once the task may start)."""

    def __init__(self, steps: int, in_snapshot: bool,
                 monkeypatch: pytest.MonkeyPatch) -> None:
        import worker.state.compose as compose_module
        from worker.state import pending_cut, snapshot

        self.steps, self.in_snapshot, self.calls = steps, in_snapshot, 0
        real_record_parts = pending_cut.record_parts

        def clone(source: Path, target: Path, nested: bool = True,
                  then: Callable[[Path], None] | None = None) -> None:
            self.step(target)
            snapshot.clone(source, target, nested, then)

        def record_parts(folder: Path, parts: Sequence[Part]) -> None:
            self.step(folder)
            real_record_parts(folder, parts)

        monkeypatch.setattr(compose_module, "clone", clone)
        monkeypatch.setattr(pending_cut, "record_parts", record_parts)

    def step(self, at: Path) -> None:
        if ("snapshots" in at.parts) != self.in_snapshot:
            return
        self.calls += 1
        if self.calls > self.steps:
            raise OSError(f"cut short after step {self.steps}")


@pytest.mark.parametrize("in_snapshot", [False, True], ids=["live", "snapshot"])
def test_a_merge_cut_short_anywhere_is_built_again_whole(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         in_snapshot: bool) -> None:
    """The merge's write path (link the first child, link the second inside it as a
    part, record the cut and the parts; built aside and renamed into place) stopped
    after each of its steps in turn, in the live store or in its first snapshot: the
    failure is raised (by the restore, or by the task's first commit, which must name
    the snapshot), no snapshot is left half made, and the next restore builds the
    merged store whole, copying nothing."""
    job = Job(tmp_path, legacy_start=False)
    keys = [os.urandom(16) for _ in range(3_000)]
    job.tasks["T"].held = job.commit("T", keys)
    job.split(0)
    low, high = sorted(job.tasks)
    sources = [
        {**job.tasks[low].held, "elasticityFactor": 2, "keyBuckets": [0], "nullKeys": True,
         "keyHash": KEY_HASH.value},
        {**job.tasks[high].held, "elasticityFactor": 2, "keyBuckets": [1],
         "nullKeys": False, "keyHash": KEY_HASH.value}]
    for steps in range(3):
        cut = _CutShort(steps, in_snapshot, monkeypatch)
        name = f"merged-{steps}"
        if in_snapshot:
            job.states.restore({name: {"stateSources": sources}}, keep={low, high})
            with pytest.raises(OSError, match="cut short"):
                job.states.back_up("9999999999999-0", {name: {"inputOffsets": []}})
        else:
            with pytest.raises(OSError, match="cut short"):
                job.states.restore({name: {"stateSources": sources}}, keep={low, high})
        monkeypatch.undo()
        assert cut.calls == steps + 1
        for folder in (task_dir(job.states.state_dir, name) / "snapshots").glob("*"):
            if folder.is_dir() and not folder.name.endswith(".partial"):  # whole
                index = SnapshotIndex.from_bytes(index_path(folder).read_bytes())
                assert inventory(folder, Digests()) == dict(index.files)
        job.states.restore({name: {"stateSources": sources}}, keep={low, high})
        assert job.states.restores[name]["copied"] == 0
        job.check(name, Task(1, 0, {}))
