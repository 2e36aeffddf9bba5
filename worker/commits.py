"""Asynchronous commits (SAMZA-2591's shape): a batch's per-bucket next offsets are
snapshotted synchronously, then uploaded by a background thread while the next batch runs.

A commit still uploading when the next is due defers that next one (offsets being
monotonic, the newest covers every older one, state snapshots included, task by task: a
task missing from the newer commit, one whose batch was cut before any of its records,
keeps the older one's checkpoint, whose output the merged commit carries) while the
oldest commit not yet acknowledged is younger than ``max_delay_s``; beyond it, processing
waits. The deferred commit is never dropped: it is uploaded when the one in flight ends,
and :meth:`AsyncCommitter.flush` (a hand-over) returns only once the newest commit is
acknowledged, or the next owner would reprocess a batch whose output this worker
already wrote.

A failed upload fails that commit only (a blob store or the coordinator unreachable: any
error but the coordinator's refusal): it is tried again with backoff, as the newest
commit at that moment, until it succeeds; nothing committed changes meanwhile, and the
first commit after the outage covers everything since. The coordinator's refusals
(``CoordinatorError``: fenced, lease lost) end the committer: they surface to the next
:meth:`submit` or :meth:`flush`, and nothing after them is sent.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from worker.client import CoordinatorError
from worker.plan import ssp_key

log = logging.getLogger("coxswain.worker")

#: (version, checkpoints, checkpoint id, output): what a commit uploads. ``output`` is
#: the batches' output when the commit writes it (exactly-once output: the batches since
#: the last commit, oldest first), else empty
Upload = Callable[[int, dict[str, Any], "str | None", tuple[Any, ...]], int]


def merge_checkpoints(older: Mapping[str, Any], newer: Mapping[str, Any]) -> dict[str, Any]:
    """A commit body covering ``older`` and then ``newer`` (task -> checkpoint): per task
    and input (SSP, key bucket), the newer offset where the newer commit has one, else
    the older. A batch leaves a task, or one of its inputs, out of its commit when it
    read none of its records (cut before them, or nothing to read): taking the newer
    body whole would drop the older progress there, and under exactly-once output leave
    the output the merged commit carries for it uncommitted, to be written again."""
    out = dict(older)
    for task, checkpoint in newer.items():
        before = out.get(task)
        if not (isinstance(before, Mapping) and isinstance(checkpoint, Mapping)
                and "inputOffsets" in before and "inputOffsets" in checkpoint):
            out[task] = checkpoint
            continue
        offsets = {ssp_key(o["ssp"]): o for o in before["inputOffsets"]}
        offsets.update((ssp_key(o["ssp"]), o) for o in checkpoint["inputOffsets"])
        out[task] = {**checkpoint, "inputOffsets": list(offsets.values())}
    return out


@dataclass(frozen=True, slots=True)
class _Commit:
    seq: int  # order of submission
    since: float  # when the oldest commit it covers was submitted (monotonic)
    version: int
    checkpoints: dict[str, Any]
    checkpoint_id: str | None
    # exactly-once output: every batch's output this commit covers, oldest first (a
    # commit replacing one not yet written carries its output too: nothing is dropped)
    output: tuple[Any, ...] = ()


class AsyncCommitter:
    """Uploads commits in a background thread, at most one at a time, newest last,
    retrying failed ones."""

    def __init__(self, upload: Upload, max_delay_s: float, *, retry_base_s: float = 0.2,
                 retry_max_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._upload = upload
        self._max_delay_s = max_delay_s
        self._retry_base_s, self._retry_max_s = retry_base_s, retry_max_s
        self._clock = clock
        self._jitter = random.Random()  # its own: the global generator is the app's
        self._cond = threading.Condition()
        self._newest: _Commit | None = None  # not yet handed to the upload
        self._in_flight: _Commit | None = None
        self._acked = 0  # seq of the last acknowledged commit
        self._seq = 0
        self._error: CoordinatorError | None = None  # a refusal: the committer is over
        self._closed = False
        self._backing_off = False  # after a failed upload, until its retry
        self.skipped = 0  # commits superseded by a newer one before their upload
        self.failures = 0  # failed uploads (each tried again)
        self.last_failure: str | None = None  # the last one's reason, while it lasts
        # tasks handed over without their last commit: task -> the newest commit (seq)
        # that must not carry them (a later one may: the task came back)
        self._forgotten: dict[str, int] = {}
        self._thread = threading.Thread(target=self._run, name="commit", daemon=True)
        self._thread.start()

    def submit(self, version: int, checkpoints: dict[str, Any],
               checkpoint_id: str | None = None, output: tuple[Any, ...] = ()) -> None:
        """Upload ``checkpoints``: now if no upload runs, else once it ends (replacing any
        commit already waiting); while the oldest unacknowledged commit is older than the
        delay, wait until it is acknowledged. Raises the coordinator's refusal of an
        earlier commit (``Fenced``, ``LeaseLost``)."""
        if not checkpoints:
            return
        with self._cond:
            self._raise_error()
            oldest = self.unacknowledged_since()
            before = self._seq
            since = self._clock()
            if self._newest is not None:  # not sent yet: this one covers it
                self.skipped += 1
                since = self._newest.since
                output = self._newest.output + output
                checkpoints = self._merged(self._newest, checkpoints)
            self._seq += 1
            commit = _Commit(self._seq, since, version, checkpoints, checkpoint_id, output)
            if self._in_flight is None and not self._backing_off:
                self._in_flight, self._newest = commit, None  # the thread is idle: now
            else:
                self._newest = commit
            self._cond.notify_all()
            if oldest is None or self._clock() - oldest < self._max_delay_s:
                return
            log.warning("commit delayed beyond %.0fs%s: processing waits for it",
                        self._max_delay_s,
                        f" ({self.last_failure})" if self.last_failure else "")
            while self._acked < before and self._error is None and not self._closed:
                self._cond.wait()
            self._raise_error()

    def forget(self, tasks: Iterable[str]) -> None:
        """``tasks`` were handed over without their last commit (it did not end in
        time): no commit submitted so far carries them any more, retries included, so
        none lands after their next owner read where to start (it would start past what
        it restored, or repeat what it did). An upload already on the wire may still
        land; a commit left with no task is dropped as done. At-least-once output
        only: an exactly-once commit's output is not split by task (its hand-over
        registers again instead)."""
        with self._cond:
            for task in tasks:
                self._forgotten[task] = self._seq

    def _merged(self, older: _Commit, newer: dict[str, Any]) -> dict[str, Any]:
        """The checkpoints of a commit replacing ``older`` (not sent, or failed):
        :func:`merge_checkpoints` of older's (but the tasks forgotten since) and the
        newer one's (under the lock)."""
        return merge_checkpoints(self._without_forgotten(older).checkpoints, newer)

    def _without_forgotten(self, commit: _Commit) -> _Commit:
        """``commit`` without the tasks forgotten since it was submitted (under the
        lock)."""
        drop = {t for t in commit.checkpoints if self._forgotten.get(t, 0) >= commit.seq}
        if not drop:
            return commit
        return replace(commit, checkpoints={t: c for t, c in commit.checkpoints.items()
                                            if t not in drop})

    def unacknowledged_since(self) -> float | None:
        """When the oldest commit not yet acknowledged was submitted (monotonic)."""
        with self._cond:
            found = [c.since for c in (self._in_flight, self._newest) if c is not None]
            return min(found) if found else None

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until the newest commit is acknowledged (raises the coordinator's refusal
        of it); False when ``timeout_s`` passed first (it is still being tried)."""
        deadline = None if timeout_s is None else self._clock() + timeout_s
        with self._cond:
            while (self._newest is not None or self._in_flight is not None) \
                    and self._error is None:
                left = None if deadline is None else deadline - self._clock()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            self._raise_error()
            return True

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the upload thread: commits not yet sent are dropped (an upload under way
        may still end, and is then acknowledged: commits are monotonic and fenced)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout_s)

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        failed_in_row = 0
        while True:
            with self._cond:
                while self._in_flight is None and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                commit = self._in_flight
                assert commit is not None
                commit = self._without_forgotten(commit)
                if not commit.checkpoints:  # every task of it handed over: nothing to send
                    self._done(commit)
                    continue
            try:
                self._upload(commit.version, commit.checkpoints, commit.checkpoint_id,
                             commit.output)
            except CoordinatorError as e:  # the coordinator's word: nothing more to send
                with self._cond:
                    self._error, self._in_flight, self._newest = e, None, None
                    self._cond.notify_all()
                return
            except Exception as e:  # a dependency down: try again
                failed_in_row += 1
                self._back_off(commit, e, failed_in_row)
                continue
            with self._cond:
                if failed_in_row:
                    log.info("commit of version %d done after %d failed attempts",
                             commit.version, failed_in_row)
                failed_in_row = 0
                self.last_failure = None
                self._done(commit)

    def _done(self, commit: _Commit) -> None:
        """``commit`` is acknowledged (or had nothing left to send); the next, if any,
        goes (under the lock)."""
        self._acked = commit.seq
        self._forgotten = {t: seq for t, seq in self._forgotten.items() if seq > commit.seq}
        self._in_flight, self._newest = self._newest, None
        self._cond.notify_all()

    def _back_off(self, commit: _Commit, error: Exception, failed_in_row: int) -> None:
        """After a failed upload: wait, then try the newest commit (this one, or a newer
        one submitted meanwhile, which covers it and is as old as it now)."""
        delay = self._jitter.uniform(0.5, 1.0) * min(
            self._retry_max_s, self._retry_base_s * 2 ** (failed_in_row - 1))
        with self._cond:
            self.failures += 1
            self.last_failure = f"{type(error).__name__}: {str(error)[:300]}"
            log.warning("commit of version %d failed (%s); trying again in %.1fs",
                        commit.version, self.last_failure, delay)
            self._in_flight, self._backing_off = None, True
            if self._newest is None:
                self._newest = commit
            else:
                self.skipped += 1  # (an upload that fails writes no output)
                self._newest = replace(self._newest, since=commit.since,
                                       output=commit.output + self._newest.output,
                                       checkpoints=self._merged(commit,
                                                                self._newest.checkpoints))
            self._cond.wait(delay)  # close() wakes it
            self._backing_off = False
            self._in_flight, self._newest = self._newest, None
            self._cond.notify_all()
