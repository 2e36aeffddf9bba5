"""Copies of a task's last snapshot linked before a composition asks for them: a split's
children's, while their parent's last commit is under way.

A split child's state is its parent's last snapshot hard-linked twice (its live store
and its first snapshot: ``compose``), ~1 000 links a copy at 4 GB. The children's key
ranges are known only from the checkpoints read after the parent's last commit, but the
links do not depend on them, and the parent's last snapshot is on disk as soon as its
last batch ends. So the handover stages the copies then (:meth:`Staging.stage`), beside
the commit, and the composition takes them (:meth:`Staging.take`) and writes only the
ranges kept: the links leave the split's pause (bench/RESULTS.md, #52).

A copy is only ever taken for the very folder it was linked from (a snapshot folder
never changes once made). Copies nobody takes go to the trash; a crash leaves them in
``{state dir}/.staged``, which the next worker on the state dir empties.
"""

from __future__ import annotations

import logging
import threading
import uuid
from pathlib import Path

from worker.state.snapshot import clone
from worker.state.trash import Trash

log = logging.getLogger("coxswain.worker.state")

STAGED = ".staged"
STALE_S = 60.0  # a copy not taken within this long never will be


class Staging:
    """The copies linked ahead for one state dir."""

    def __init__(self, state_dir: Path, trash: Trash, stale_s: float = STALE_S) -> None:
        self._root = state_dir / STAGED
        self._trash = trash
        self._stale_s = stale_s
        self._cond = threading.Condition()
        self._ready: dict[Path, list[Path]] = {}  # source folder -> copies not taken
        self._linking: dict[Path, int] = {}  # source folder -> copies being linked
        self._doomed: set[Path] = set()  # discarded while linked: trashed when done
        self._staged: dict[Path, int] = {}  # source folder -> its latest staging's number
        self._stagings = 0
        if self._root.is_dir():  # what a crashed worker left
            trash.discard(self._root)

    def stage(self, source: Path, copies: int) -> None:
        """Link ``copies`` copies of the snapshot folder ``source`` in the background;
        those not taken within ``stale_s`` are discarded (the composition they were
        staged for never came: the guess was wrong), so that they never keep the
        folder's files on disk past it."""
        with self._cond:
            self._stagings += 1
            number = self._staged[source] = self._stagings
            self._linking[source] = self._linking.get(source, 0) + copies
            self._doomed.discard(source)
        expiry = threading.Timer(self._stale_s, self._expire, args=(source, number))
        expiry.daemon = True
        expiry.start()
        # two threads (a link waits in the kernel; the commit it runs beside, and the
        # batches, need the machine's other core), each making its share, one at a time
        for share in (copies - copies // 2, copies // 2):
            if share:
                threading.Thread(target=self._link, args=(source, share),
                                 name="state-staging", daemon=True).start()

    def _link(self, source: Path, copies: int) -> None:
        for _ in range(copies):
            copy = self._root / uuid.uuid4().hex[:16]
            made = False
            try:
                self._root.mkdir(parents=True, exist_ok=True)
                clone(source, copy)
                made = True
            except OSError as e:  # (the composition then links its own copies)
                log.warning("copy of %s not staged: %s", source, e)
            finally:
                with self._cond:
                    doomed = source in self._doomed
                    self._linking[source] -= 1
                    if not self._linking[source]:
                        del self._linking[source]
                        self._doomed.discard(source)
                    if made and not doomed:
                        self._ready.setdefault(source, []).append(copy)
                    self._cond.notify_all()
                if made and doomed:
                    self._trash.discard(copy)

    def _expire(self, source: Path, number: int) -> None:
        """The copies of one staging not taken in time go (unless staged again since)."""
        with self._cond:
            if self._staged.get(source) != number:
                return
            del self._staged[source]
        self.discard(source)

    def take(self, source: Path) -> Path | None:
        """A copy of the folder ``source`` linked ahead, now the caller's (waiting for one
        being linked), or None."""
        with self._cond:
            while not self._ready.get(source) and self._linking.get(source):
                self._cond.wait()
            found = self._ready.get(source)
            return found.pop() if found else None

    def discard(self, under: Path) -> None:
        """The copies nobody took of the folder ``under`` or of any folder in it (a
        task's: all its snapshots') go to the trash, those still being linked once they
        are: this never waits."""
        with self._cond:
            self._doomed.update(s for s in self._linking if s.is_relative_to(under))
            left = [c for s in [s for s in self._ready if s.is_relative_to(under)]
                    for c in self._ready.pop(s)]
        for copy in left:
            self._trash.discard(copy)
