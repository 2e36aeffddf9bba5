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

rocksdict opens an existing instance with the column-family options of its OPTIONS file,
whatever options it is given, unless they are passed for the column family by name: so
every open passes them so (:func:`open_instance`), and they hold from the first moment
on, for stores made by any release (and the bloom filter reaches their new files too).

An instance opened briefly outside a batch (a composition's cut, a restore) opens with
automatic compactions off (``compact=False``): its close would otherwise wait for the
compactions its cut or its files' owed work start, on the path of a split's or merge's
pause; the task's next batch runs them, after its records.
"""

from __future__ import annotations

import time
from pathlib import Path

from rocksdict import AccessType, BlockBasedOptions, Options, Rdict

#: the level sizes of every instance (column-family options, as RocksDB writes them in
#: its OPTIONS file)
LEVEL_OPTIONS = {
    "target_file_size_base": str(4 << 20),
    "max_bytes_for_level_base": str(16 << 20),
    # one compaction's input at most (RocksDB's default is 25 files' worth, 1.6 GB with
    # 64 MB files): what a commit may have to upload from one compaction
    "max_compaction_bytes": str(100 << 20),
}
#: how long a close waits for the compactions running in the instance (the bound above
#: makes one last well under a second here; past this the close cancels it)
SETTLE_LIMIT_S = 3.0
_POLL_S = 0.005


#: ``open_files`` for an instance that opens each SST file at the first read that needs
#: it, then keeps it open (a table cache larger than any store). RocksDB's default (-1)
#: opens every file when the instance opens (~25 us a file, 25-130 ms at 4 GB): a
#: batch's store is opened for each batch, and a batch of a few records reads a few
#: files (a split child's first batch: its pause)
FILES_ON_USE = 1 << 20
#: ``open_files`` for an instance opened only to be cut, checkpointed or made (a split's
#: composition, a restore): it reads a key or two, so opening its ~1 000 files at 4 GB
#: would be most of its open (11 ms instead of 26, measured; bench/RESULTS.md)
FEW_FILES = 16


def options(*, compact: bool = True, open_files: int = FILES_ON_USE) -> Options:
    """This project's options for an instance; ``compact``: automatic compactions on;
    ``open_files``: how many SST files it keeps open (:data:`FILES_ON_USE`, :data:`FEW_FILES`)."""
    out = Options(raw_mode=True)
    out.set_max_open_files(open_files)
    out.create_if_missing(True)
    # every batch's commit flushes a small SST file, and in the bucket-ordered layout
    # each spans the whole key space: a read would look into every one of them. A bloom
    # filter per file (10 bits a key: ~1% false positives) lets a read skip the files
    # that cannot hold its key
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    out.set_block_based_table_factory(table)
    out.set_target_file_size_base(int(LEVEL_OPTIONS["target_file_size_base"]))
    out.set_max_bytes_for_level_base(int(LEVEL_OPTIONS["max_bytes_for_level_base"]))
    out.set_max_compaction_bytes(int(LEVEL_OPTIONS["max_compaction_bytes"]))
    out.set_disable_auto_compactions(not compact)
    return out


def open_instance(path: Path, *, compact: bool = True, open_files: int = FILES_ON_USE
                  ) -> Rdict:
    """Open (or create) the RocksDB instance at ``path`` with this project's options,
    automatic compactions on or off (``compact``) from the moment it opens."""
    given = options(compact=compact, open_files=open_files)
    # named for the default column family, the options replace the OPTIONS file's
    return Rdict(str(path), given, column_families={"default": given})


def open_read_only(path: Path, open_files: int = FILES_ON_USE) -> Rdict:
    """The instance at ``path`` opened to read a key or two: no lock taken, nothing
    written (a snapshot folder stays as it is)."""
    given = options(compact=False, open_files=open_files)
    return Rdict(str(path), given, column_families={"default": given},
                 access_type=AccessType.read_only())


def running_compactions(db: Rdict) -> int:
    """How many compactions the instance is running."""
    return int(db.property_int_value("rocksdb.num-running-compactions") or 0)


def settle(db: Rdict, limit_s: float = SETTLE_LIMIT_S) -> float:
    """Let the compactions ``db`` is running finish, starting no new one (the instance is
    about to close: compactions stay off); returns the seconds waited."""
    if not running_compactions(db):
        return 0.0
    started = time.monotonic()
    db.set_options({"disable_auto_compactions": "true"})
    while running_compactions(db) and time.monotonic() - started < limit_s:
        time.sleep(_POLL_S)
    return time.monotonic() - started


def close_instance(db: Rdict) -> None:
    """Close ``db`` once its running compactions are done."""
    try:
        settle(db)
    finally:
        db.close()
