"""How task stores open and close RocksDB (``worker.state.rocks``): a close keeps the work
of the compactions running in it; every open gives the level options, on a new instance
and on one made before them, and turns automatic compactions on or off as asked from
its first moment, whatever the instance's OPTIONS file says."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rocksdict import AccessType, Options, Rdict

from worker.state.rocks import (
    LEVEL_OPTIONS,
    close_instance,
    open_instance,
    running_compactions,
    settle,
)


def _persisted(path: Path) -> dict[str, str]:
    """The column-family options of the instance's newest OPTIONS file."""
    newest = max(path.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    out = {}
    for line in newest.read_text().splitlines():
        key, sep, value = line.strip().partition("=")
        if sep:
            out[key] = value
    return out


def _level0_files(path: Path) -> int:
    """Level-0 files, read from an instance opened read-only (which never compacts)."""
    db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        return int(db.property_int_value("rocksdb.num-files-at-level0") or 0)
    finally:
        db.close()


def _flush_files(db: Rdict, files: int, entries: int = 60_000) -> None:
    for _ in range(files):
        for _ in range(entries):
            db.put(os.urandom(16), os.urandom(200))
        db.flush()


def test_a_close_lets_the_running_compaction_finish(tmp_path: Path) -> None:
    db = open_instance(tmp_path / "db")
    try:
        for _ in range(20):  # level-0 files until RocksDB is seen compacting them
            _flush_files(db, 1)
            level0 = int(db.property_int_value("rocksdb.num-files-at-level0") or 0)
            # read after the count: the compaction's inputs are among the files counted
            if running_compactions(db):
                break
        else:
            raise AssertionError("no compaction seen running")
    finally:
        close_instance(db)
    # cancelled, it would have left its level-0 inputs for the next open to compact again
    assert _level0_files(tmp_path / "db") < level0


def test_settling_an_idle_instance_waits_for_nothing(tmp_path: Path) -> None:
    db = open_instance(tmp_path / "db")
    try:
        db.put(b"k", b"v")
        assert settle(db) == 0.0
    finally:
        close_instance(db)


def _compacts_level0(db: Rdict, failure: str) -> None:
    """Wait until ``db`` compacted its level-0 files below the trigger (4), at most 10 s."""
    deadline = time.monotonic() + 10
    while int(db.property_int_value("rocksdb.num-files-at-level0") or 0) >= 4:
        assert time.monotonic() < deadline, failure
        time.sleep(0.01)


def _with_owed_level0(path: Path, files: int, *, enabled_in_options: bool) -> None:
    """An instance at ``path`` holding ``files`` level-0 files (compaction owed under this
    project's trigger, 4), closed with automatic compactions on or off in its OPTIONS
    file. Its own trigger is out of reach, so that none starts before it closes (turning
    them on just before the close would start one, racing the close)."""
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_level_zero_file_num_compaction_trigger(1000)
    options.set_disable_auto_compactions(not enabled_in_options)
    # otherwise RocksDB's defaults (an older release's store)
    old = Rdict(str(path), options, column_families={"default": options})
    _flush_files(old, files, 2_000)
    assert int(old.property_int_value("rocksdb.num-files-at-level0") or 0) == files
    old.close()


def test_every_open_sets_the_level_options_and_enables_compactions(tmp_path: Path) -> None:
    path = tmp_path / "db"
    # a process that died inside settle() leaves compactions disabled in OPTIONS
    _with_owed_level0(path, 6, enabled_in_options=False)
    assert _persisted(path)["target_file_size_base"] == str(64 << 20)
    db = open_instance(path)
    try:
        persisted = _persisted(path)
        for key, value in LEVEL_OPTIONS.items():
            assert persisted[key] == value, key
        assert persisted["disable_auto_compactions"] == "false"
        _compacts_level0(db, "compactions stayed disabled")
    finally:
        close_instance(db)


def test_an_open_without_compactions_starts_none_and_closes_at_once(tmp_path: Path) -> None:
    """What a composition opens: owed level-0 files stay as they are, from the moment of
    the open (an OPTIONS file saying "compact" is not followed), and the close waits for
    nothing; the next ordinary open compacts them."""
    path = tmp_path / "db"
    _with_owed_level0(path, 6, enabled_in_options=True)
    db = open_instance(path, compact=False)
    try:
        assert _persisted(path)["disable_auto_compactions"] == "true"
        time.sleep(0.3)  # what RocksDB would have started by now, it would still run
        assert running_compactions(db) == 0
        assert int(db.property_int_value("rocksdb.num-files-at-level0") or 0) == 6
        assert settle(db) == 0.0
    finally:
        close_instance(db)
    assert _level0_files(path) == 6
    db = open_instance(path)
    try:
        _compacts_level0(db, "the batch's open left them uncompacted")
    finally:
        close_instance(db)
