"""How task stores open and close RocksDB (``worker.state.rocks``): a close keeps the work
of the compactions running in it, and every open sets the level options, on a new
instance and on one made before them, and clears compactions left disabled."""

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
    assert _persisted(tmp_path / "db")["disable_auto_compactions"] == "false"


def test_settling_an_idle_instance_waits_for_nothing(tmp_path: Path) -> None:
    db = open_instance(tmp_path / "db")
    try:
        db.put(b"k", b"v")
        assert settle(db) == 0.0
    finally:
        close_instance(db)


def test_every_open_sets_the_level_options_and_enables_compactions(tmp_path: Path) -> None:
    path = tmp_path / "db"
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    old = Rdict(str(path), options)  # made with RocksDB's defaults (an older release)
    old.put(b"k", b"v")
    # a process that died inside settle() leaves compactions disabled in OPTIONS
    old.set_options({"disable_auto_compactions": "true"})
    old.close()
    assert _persisted(path)["target_file_size_base"] == str(64 << 20)
    db = open_instance(path)
    try:
        persisted = _persisted(path)
        for key, value in LEVEL_OPTIONS.items():
            assert persisted[key] == value, key
        _flush_files(db, 4, 2_000)
        deadline = time.monotonic() + 10
        while int(db.property_int_value("rocksdb.num-files-at-level0") or 0) >= 4:
            assert time.monotonic() < deadline, "compactions stayed disabled"
            time.sleep(0.01)
    finally:
        close_instance(db)
