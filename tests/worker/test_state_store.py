"""Per-key state: the entry-key encoding (pure, property-tested) and the RocksDB store,
whose committed state is the fold of exactly the committed batches, across failed
batches and reopenings."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rocksdict import Options, Rdict

from grouping.key_bucket import key_bucket
from grouping.key_hash import KeyHash
from worker.state.keys import (
    ENTRIES_BEGIN,
    ENTRIES_END,
    LEGACY,
    META_KEY,
    BucketLayout,
    Layout,
    bucket_range,
    complement,
    kept_ranges,
)
from worker.state.store import StateLayoutMismatch, TaskStore

record_keys = st.one_of(st.none(), st.binary(max_size=12))
names = st.text(max_size=8)
layouts = st.sampled_from([LEGACY, BucketLayout(KeyHash.XXHASH64), BucketLayout(KeyHash.CRC32)])
factors = st.sampled_from([1, 2, 4, 8, 16, 64, 1 << 20])


@given(layouts, record_keys, names)
def test_an_entry_key_gives_back_its_record_key_and_name(layout: Layout, key: bytes | None,
                                                         name: str) -> None:
    assert layout.split(layout.entry_key(key, name)) == (key, name)
    assert layout.entry_key(key, name).startswith(layout.prefix(key))


@given(layouts, record_keys, record_keys, names)
def test_entries_of_one_record_key_never_share_another_keys_prefix(
    layout: Layout, a: bytes | None, b: bytes | None, name: str,
) -> None:
    if a != b:
        assert not layout.entry_key(b, name).startswith(layout.prefix(a))


@given(st.sampled_from([KeyHash.XXHASH64, KeyHash.CRC32]), st.binary(max_size=40), names,
       factors)
def test_a_keys_entries_lie_in_its_buckets_range_and_in_no_other(
        key_hash: KeyHash, key: bytes, name: str, factor: int) -> None:
    stored = BucketLayout(key_hash).entry_key(key, name)
    bucket = key_bucket(key, 0, factor, key_hash)
    assert stored in bucket_range(bucket, factor)
    for other in {0, factor - 1, (bucket + 1) % factor, bucket ^ (factor >> 1)} - {bucket}:
        assert stored not in bucket_range(other, factor)
    assert ENTRIES_BEGIN <= stored < ENTRIES_END and META_KEY >= ENTRIES_END


@given(factors, st.data())
def test_a_buckets_two_halves_are_its_ranges_two_halves(factor: int, data: st.DataObject
                                                       ) -> None:
    bucket = data.draw(st.integers(0, factor - 1))
    whole, low, high = (bucket_range(bucket, factor), bucket_range(bucket, 2 * factor),
                        bucket_range(bucket + factor, 2 * factor))
    assert (low.begin, low.end, high.begin, high.end) == (whole.begin, high.begin, low.end,
                                                          whole.end)


@given(factors, st.data(), st.booleans())
def test_kept_ranges_and_their_complement_tile_the_entries_key_space(
        factor: int, data: st.DataObject, null_keys: bool) -> None:
    buckets = data.draw(st.frozensets(st.integers(0, min(factor, 64) - 1)))
    kept = kept_ranges(buckets, factor, null_keys)
    pieces = sorted([*kept, *complement(kept)], key=lambda r: r.begin)
    assert pieces[0].begin == ENTRIES_BEGIN and pieces[-1].end == ENTRIES_END
    assert all(a.end == b.begin for a, b in itertools.pairwise(pieces))
    assert all(r.begin < r.end for r in pieces)


ops = st.lists(st.one_of(
    st.tuples(st.just("set"), st.sampled_from(["a", "b", None]), st.sampled_from(["n", "m"]),
              st.integers(-5, 5)),
    st.tuples(st.just("bytes"), st.sampled_from(["a", "b"]), st.just("raw"), st.binary(max_size=4)),
    st.tuples(st.just("delete"), st.sampled_from(["a", "b", None]), st.sampled_from(["n", "m"]),
              st.none()),
    st.tuples(st.sampled_from(["commit", "fail", "crash"]), st.none(), st.just(""), st.none()),
), max_size=40)


@given(ops)
def test_the_store_holds_exactly_the_committed_batches(steps: list[tuple[Any, ...]]) -> None:
    folder = Path(tempfile.mkdtemp())
    try:
        store = TaskStore(folder / "live")
        committed: dict[tuple[Any, str], Any] = {}
        batch: dict[tuple[Any, str], Any] = {}
        for op, key, name, value in steps:
            if op == "set":
                store.set(key, name, value)
                batch[(key, name)] = value
            elif op == "bytes":
                store.set_bytes(key, name, value)
                batch[(key, name)] = value
            elif op == "delete":
                store.delete(key, name)
                batch[(key, name)] = None
            elif op == "commit":
                store.commit()
                committed = {k: v for k, v in {**committed, **batch}.items() if v is not None}
                batch = {}
            elif op == "fail":  # the batch failed: it will be processed again
                store.discard()
                batch = {}
            else:  # the process dies: what was not committed is gone
                store.close()
                store = TaskStore(folder / "live")
                batch = {}
            seen = {**committed, **batch}
            for k in ("a", "b", None):
                expected = {n: v for (kk, n), v in seen.items() if kk == k and v is not None}
                assert store.items(k) == expected
        store.close()
    finally:
        shutil.rmtree(folder)


def test_a_snapshot_opens_as_a_store_with_the_committed_state(tmp_path: Path) -> None:
    with TaskStore(tmp_path / "live") as store:
        store.set("customer-1", "total", 10)
        store.set_bytes(b"customer-2", "blob", b"\x00\xff")
        store.commit()
        store.snapshot(tmp_path / "snap-1")
        store.set("customer-1", "total", 11)
        store.commit()
    with TaskStore(tmp_path / "snap-1") as snap:
        assert snap.get("customer-1", "total") == 10
        assert snap.get_bytes("customer-2", "blob") == b"\x00\xff"
        assert sorted(snap.split_key(k)[0] or b"" for k, _ in snap.entries()) == [
            b"customer-1", b"customer-2"]


def test_a_new_store_records_its_layout_and_refuses_another_hash(tmp_path: Path) -> None:
    with TaskStore(tmp_path / "live", KeyHash.CRC32) as store:
        assert store.bucket_ordered
        store.set("k", "n", 1)
        store.commit()
    with TaskStore(tmp_path / "live") as store:  # no hash given: the recorded one
        assert store.layout == BucketLayout(KeyHash.CRC32) and store.get("k", "n") == 1
    with pytest.raises(StateLayoutMismatch, match=r"crc32.*xxhash64"):
        TaskStore(tmp_path / "live", KeyHash.XXHASH64)


def test_a_store_written_before_layouts_keeps_its_legacy_layout(tmp_path: Path) -> None:
    """Entries in the first release's encoding (``len + key + name``, no layout entry),
    null keys included, as that release's RocksDB wrote them."""
    db = Rdict(str(tmp_path / "live"), Options(raw_mode=True))
    db[b"\xff\xff\xff\xffn"] = b'J3'  # a null key's entry
    db[b"\x00\x00\x00\x02k1n"] = b'J1'
    db.close()
    with TaskStore(tmp_path / "live", KeyHash.XXHASH64) as store:
        assert store.layout is LEGACY and not store.bucket_ordered
        assert store.get(None, "n") == 3 and store.get(b"k1", "n") == 1
        store.set(b"k2", "n", 2)
        store.commit()
        assert sorted((store.split_key(k)[0] or b"") for k, _ in store.entries()) == [
            b"", b"k1", b"k2"]
