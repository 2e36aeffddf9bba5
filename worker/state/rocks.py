"""How a task store opens and closes its RocksDB instances: options, and compactions.

A task's store is open only while a batch runs (the Spark task that runs the task's rows
opens it, commits, snapshots and closes it), and RocksDB cancels the compactions it is
running when an instance closes: their work is lost. Two consequences, both measured
(bench/RESULTS.md, "compactions that finish"):

* With RocksDB's default level sizes a compaction is large. In the bucket-ordered layout
  every flushed file spans the whole hashed key space, so a level-0 compaction rewrites
  the whole base level (256 MB by default, more while compactions are owed), and a
  deeper one a 64 MB file with the ten times more it overlaps below. Such a compaction
  rarely fits in a batch; the owed work grows until one does, and the batch whose
  snapshot holds its output uploads hundreds of MB in its commit, which a handover
  (a split's) then waits for.
* So the levels are made small (:data:`LEVEL_OPTIONS`: 4 MB files, a 16 MB base level),
  which bounds a compaction to tens of MB, and an instance closes only once the
  compactions it runs have finished (:func:`close_instance`; new ones are not started
  meanwhile), so their work is kept. A commit then uploads at most a few tens of MB of
  compaction output.

RocksDB keeps an existing instance's options from its OPTIONS file, whatever options it
is opened with (rocksdict passes them only to a new one), so the level options are set
again at every open; that also clears a "compactions disabled" left by a process that
died while closing.
"""

from __future__ import annotations

import time
from pathlib import Path

from rocksdict import BlockBasedOptions, Options, Rdict

#: per-column-family options set on every open (all changeable on a running instance)
LEVEL_OPTIONS = {
    "target_file_size_base": str(4 << 20),
    "max_bytes_for_level_base": str(16 << 20),
    # one compaction's input at most (RocksDB's default is 25 files' worth, 1.6 GB with
    # 64 MB files): what a commit may have to upload from one compaction
    "max_compaction_bytes": str(100 << 20),
    "disable_auto_compactions": "false",
}
#: how long a close waits for the compactions running in the instance (the bound above
#: makes one last well under a second here; past this the close cancels it)
SETTLE_LIMIT_S = 3.0
_POLL_S = 0.005


def _options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    # every batch's commit flushes a small SST file, and in the bucket-ordered layout
    # each spans the whole key space: a read would look into every one of them. A bloom
    # filter per file (10 bits a key: ~1% false positives) lets a read skip the files
    # that cannot hold its key
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    options.set_block_based_table_factory(table)
    return options


def open_instance(path: Path) -> Rdict:
    """Open (or create) the RocksDB instance at ``path`` with this project's options."""
    db = Rdict(str(path), _options())
    try:
        db.set_options(LEVEL_OPTIONS)
    except BaseException:
        db.close()
        raise
    return db


def running_compactions(db: Rdict) -> int:
    """How many compactions the instance is running."""
    return int(db.property_int_value("rocksdb.num-running-compactions") or 0)


def settle(db: Rdict, limit_s: float = SETTLE_LIMIT_S) -> float:
    """Let the compactions ``db`` is running finish, starting no new one meanwhile;
    returns the seconds waited. Compactions are enabled again before it returns, so the
    instance's next open (and any other user) compacts as usual."""
    if not running_compactions(db):
        return 0.0
    started = time.monotonic()
    db.set_options({"disable_auto_compactions": "true"})
    try:
        while running_compactions(db) and time.monotonic() - started < limit_s:
            time.sleep(_POLL_S)
    finally:
        db.set_options({"disable_auto_compactions": "false"})
    return time.monotonic() - started


def close_instance(db: Rdict) -> None:
    """Close ``db`` once its running compactions are done."""
    try:
        settle(db)
    finally:
        db.close()
