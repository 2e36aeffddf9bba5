"""Local snapshots of a task's state and what files they hold.

Layout under a processor's state dir (``--state-dir``), per task::

    {task}/live/                      the store the task writes (RocksDB)
    {task}/snapshots/{checkpoint id}/ one RocksDB checkpoint per committed batch

A snapshot is immutable once made. RocksDB's SST files never change after they are
written, so a file's digest is computed once and remembered by (inode, size, mtime);
snapshots share SST files by hard link, and so share the digest.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One file of a snapshot: its size and SHA-256 (hex)."""

    size: int
    sha256: str


def task_dir(state_dir: Path, task_name: str) -> Path:
    """The folder of ``task_name``'s state (task names have spaces and brackets: each
    character outside ``[A-Za-z0-9_.-]`` becomes ``_XX``, its hex code, so names stay
    distinct and readable)."""
    return state_dir / _SAFE.sub(lambda m: f"_{ord(m.group()):02x}", task_name)


NAME_FILE = "task-name"


def claim_task_dir(state_dir: Path, task_name: str) -> Path:
    """The task's folder, created with a file naming the task (folder names are encoded:
    this is how a restarted worker knows which tasks' state it holds)."""
    folder = task_dir(state_dir, task_name)
    folder.mkdir(parents=True, exist_ok=True)
    name = folder / NAME_FILE
    if not name.exists():
        name.write_text(task_name)
    return folder


def held_tasks(state_dir: Path) -> list[str]:
    """The tasks whose folders are under ``state_dir``."""
    if not state_dir.exists():
        return []
    return sorted(p.read_text() for p in state_dir.glob(f"*/{NAME_FILE}"))


def snapshot_dir(state_dir: Path, task_name: str, checkpoint_id: str) -> Path:
    """Where the snapshot of ``checkpoint_id`` lives."""
    return task_dir(state_dir, task_name) / "snapshots" / checkpoint_id


class Digests:
    """SHA-256 of files, each read once while it keeps its inode, size and mtime."""

    def __init__(self) -> None:
        self._known: dict[tuple[int, int, int, int], str] = {}

    def of(self, path: Path | str) -> FileInfo:
        """The size and digest of ``path``."""
        st = os.stat(path)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        digest = self._known.get(key)
        if digest is None:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
            digest = h.hexdigest()
            self._known[key] = digest
        return FileInfo(st.st_size, digest)


def files_in(folder: Path | str, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(path inside ``folder``, path) of every file under ``folder``, in no set order.
    ``os.scandir``, not ``pathlib``: a 4 GB store has ~1 000 SST files, and a split walks
    its snapshot several times before the children start, where ``rglob`` and
    ``relative_to`` cost ~30 us a file in Python alone."""
    with os.scandir(folder) as found:
        for entry in found:
            if entry.is_dir():
                yield from files_in(entry.path, f"{prefix}{entry.name}/")
            elif entry.is_file():
                yield prefix + entry.name, entry.path


def inventory(folder: Path, digests: Digests) -> dict[str, FileInfo]:
    """Every file of a snapshot folder by its path inside it, in name order (a RocksDB
    checkpoint is flat; a store of several parts has each part's checkpoint in a folder
    of its own)."""
    return {name: digests.of(path) for name, path in sorted(files_in(folder))}


def clone(source: Path, target: Path, nested: bool = True,
          then: Callable[[Path], None] | None = None) -> None:
    """A working copy of a snapshot: SST files hard-linked (immutable; RocksDB deletes
    rather than rewrites them), the small mutable ones (MANIFEST, CURRENT, OPTIONS, WAL)
    copied; the parts' folders too unless not ``nested`` (the root instance alone).
    Built beside ``target`` (``then`` called on it last) and renamed into place, so a
    crash leaves either nothing or the whole copy."""
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    _link_tree(source, staging, nested)
    if then is not None:
        then(staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def _link_tree(source: Path | str, target: Path | str, nested: bool) -> None:
    os.makedirs(target)
    with os.scandir(source) as found:
        for entry in found:
            into = os.path.join(target, entry.name)
            if entry.is_dir():
                if nested:
                    _link_tree(entry.path, into, nested)
            elif entry.name.endswith(".sst"):
                os.link(entry.path, into)
            else:
                shutil.copy2(entry.path, into)


def index_path(snapshot: Path) -> Path:
    """Where the index of a local snapshot is kept: beside it (inside, it would be a file
    of the snapshot)."""
    return snapshot.with_name(snapshot.name + ".index.json")
