"""Per-key state: the entry-key encoding (pure, property-tested) and the RocksDB store,
whose committed state is the fold of exactly the committed batches, across failed
batches and reopenings."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from worker.state.keys import entry_key, prefix, split
from worker.state.store import TaskStore

record_keys = st.one_of(st.none(), st.binary(max_size=12))
names = st.text(max_size=8)


@given(record_keys, names)
def test_an_entry_key_gives_back_its_record_key_and_name(key: bytes | None, name: str) -> None:
    assert split(entry_key(key, name)) == (key, name)
    assert entry_key(key, name).startswith(prefix(key))


@given(record_keys, record_keys, names)
def test_entries_of_one_record_key_never_share_another_keys_prefix(
    a: bytes | None, b: bytes | None, name: str,
) -> None:
    if a != b:
        assert not entry_key(b, name).startswith(prefix(a))


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
        assert [split(k)[0] for k, _ in snap.entries()] == [b"customer-1", b"customer-2"]
