"""Running tasks' new SST files sent to the blob store while their batches run, so that
a commit's backup sends only what appeared at the very end of its batch.

A commit uploads the files of the batch's snapshot that its task's last committed index
lacks: the batch's own flush, and every file RocksDB's compactions wrote meanwhile. A
store a little behind on its compactions (4 GB loaded in minutes owes gigabytes of
them) writes ~20 MB of new files a batch, and a handover waits for the lost tasks' last
commit: a split at 4 GB paused 0.16 s longer than at 100 MB for that upload alone. The
files are immutable once written, so they can go as soon as they are: this module
watches the running tasks' live stores and sends each new SST file once it is written
to its end (its footer); the backup then finds it sent (:meth:`PreSender.sent`) and
sends only the rest.

Never a correctness question, only one of bytes: a file sent that no snapshot came to
name (compacted away first) is a blob no index names, collected with the others
(content-addressed: even a file sent before it was whole would only be such a blob); a
file the backup finds unsent, or sent too long ago, it sends
itself. Against the collector (``worker.state.gc``): a blob younger than the grace period
is never collected, and the backup reuses a sent blob only within half of it, so the
index naming the blob is written while the blob is still young.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from worker.state.backup import blob_key
from worker.state.blobs import BlobStore
from worker.state.snapshot import Digests

log = logging.getLogger("coxswain.worker.state")

#: how often the live stores are looked at
INTERVAL_S = 0.05
#: the last 8 bytes of a whole SST file (RocksDB's block-based table format writes its
#: footer, which ends with this magic number, last): a file without it is still being
#: written by a flush or compaction
SST_MAGIC = (0x88E241B785F4CFF7).to_bytes(8, "little")
#: a task's files sent at once at most; more wait for the next look (the backup sends
#: whatever is still unsent: a store loaded in bulk must not flood the upload threads)
MOST_IN_FLIGHT = 2


def whole(path: str) -> bool:
    """Whether the SST file at ``path`` is written to its end (its footer's magic)."""
    try:
        with open(path, "rb") as f:
            f.seek(-len(SST_MAGIC), os.SEEK_END)
            return f.read() == SST_MAGIC
    except OSError:  # shorter than the magic, or gone
        return False


class PreSender:
    """Watches the live stores ``live(task)`` of the tasks ``running()`` names."""

    def __init__(self, blobs: BlobStore, digests: Digests, live: Callable[[str], Path],
                 fresh_s: float, clock: Callable[[], float] = time.time,
                 threads: int = 2) -> None:
        self._blobs = blobs
        self._digests = digests
        self._live = live
        self._fresh_s = fresh_s
        self._clock = clock
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="presend")
        self._lock = threading.Lock()
        self._stores: dict[str, int] = {}  # task -> its live store folder's inode
        # task -> SST names there at the first look, or sent (or being sent) since
        self._seen: dict[str, set[str]] = {}
        self._sent: dict[str, float] = {}  # blob key -> when its upload started
        self._in_flight: dict[str, Future[str | None]] = {}  # path -> its send
        self._thread: threading.Thread | None = None
        self.sent_bytes = 0  # for the bench and the logs

    def start(self, running: Callable[[], Iterable[str]], over: threading.Event
              ) -> PreSender:
        """Look every :data:`INTERVAL_S` until ``over`` is set."""

        def loop() -> None:
            while not over.wait(INTERVAL_S):
                try:
                    self.look(running())
                except Exception as e:  # a store replaced under the look: next time
                    log.debug("pre-sending: %s: %s", type(e).__name__, e)

        self._thread = threading.Thread(target=loop, name="presend", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def look(self, tasks: Iterable[str]) -> None:
        """One look at ``tasks``' live stores: send the new SST files written whole."""
        watched = set(tasks)
        with self._lock:
            for gone in set(self._seen) - watched:
                del self._seen[gone]
                self._stores.pop(gone, None)
            self._in_flight = {p: f for p, f in self._in_flight.items() if not f.done()}
        for task in sorted(watched):
            self._look_at(task, self._live(task))

    def _look_at(self, task: str, folder: Path) -> None:
        try:
            store = os.stat(folder).st_ino
            with os.scandir(folder) as found:
                names = {e.name for e in found if e.name.endswith(".sst")}
        except OSError:  # not built yet, or being replaced
            return
        with self._lock:
            if self._stores.get(task) != store:
                # a store first seen (or rebuilt: restored again): its files came from
                # blobs, or from a source task's, which its first backup reuses; only
                # files written from now on are sent ahead
                self._stores[task] = store
                self._seen[task] = names
                return
            seen = self._seen[task]
            seen &= names  # deleted files (compacted away) are forgotten
            busy = sum(1 for p in self._in_flight if p.startswith(str(folder)))
        for name in sorted(names - seen):
            if busy >= MOST_IN_FLIGHT:
                break
            path = os.path.join(folder, name)
            if not whole(path):
                continue  # still being written: looked at again next time
            busy += 1
            with self._lock:
                seen.add(name)
                self._in_flight[path] = self._pool.submit(self._send, path)

    def _send(self, path: str) -> str | None:
        try:
            info = self._digests.of(path)
            key = blob_key(info)
            with self._lock:
                if self._clock() - self._sent.get(key, float("-inf")) < self._fresh_s / 2:
                    return key
            began = self._clock()
            self._blobs.put_file(key, Path(path))
        except (OSError, KeyError) as e:  # compacted away meanwhile: nothing to send
            log.debug("pre-sending %s: %s", path, e)
            return None
        with self._lock:
            self._sent[key] = began
            self.sent_bytes += info.size
        return key

    def sent(self, task: str, files: Mapping[str, str]) -> set[str]:
        """Of the blobs of a snapshot of ``task`` about to be backed up (``files``: its
        file names -> blob keys; a checkpoint keeps the live store's names), those sent
        recently enough for an index written now to name them unsent. Its files being
        sent are waited for (a file half sent goes faster than one sent again; one
        queued is left to the backup), and the rest are the backup's: never sent ahead
        from now on (no file twice)."""
        live = self._live(task)
        with self._lock:
            if task in self._seen:
                self._seen[task] |= files.keys()
            pending = [f for path, f in self._in_flight.items()
                       if os.path.basename(path) in files and Path(path).parent == live]
        for future in pending:
            if future.cancel():
                continue  # not started: the backup's own send is as quick
            try:
                future.result(timeout=30)
            except Exception:  # its own failure: the backup sends the file itself
                continue
        with self._lock:
            horizon = self._clock() - self._fresh_s / 2
            if len(self._sent) > 10_000:  # what is too old serves nobody
                self._sent = {k: t for k, t in self._sent.items() if t > horizon}
            return {k for k in files.values() if self._sent.get(k, float("-inf")) > horizon}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
