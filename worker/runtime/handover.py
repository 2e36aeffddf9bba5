"""Following the job models: the running tasks change at batch boundaries, the query
goes on (the tasks a worker keeps are never interrupted).

For each model the long poll brings (``worker.runtime.control.ModelFollower``):

1. tasks this processor lost stop running at once (no batch processes them any more),
   and their last commit is awaited (at most the commit delay);
2. the version is acknowledged (the barrier's promise: lost tasks handed over);
3. once its barrier is done, the tasks gained are planned from their resolved
   checkpoints: a child shard's whose parents are not finished waits (asked about again
   every second); the others restore their state on threads of their own (a long
   restore never delays the next version's handover or ack, nor another task's
   restore), then join the running tasks as each is restored, if still this
   processor's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from worker.client import CoordinatorClient, CoordinatorError, Fenced
from worker.output.exactly_once import Fencing
from worker.plan import QueryPlan, plan_query
from worker.running import only
from worker.runtime.batches import BatchRunner
from worker.runtime.control import ModelFollower
from worker.runtime.query import SourceQuery
from worker.runtime.query_failures import Restarts, classify, python_traceback
from worker.state.remote import ExecutorStates, StateKeeping
from worker.state.tasks import TaskStates, restore_groups

log = logging.getLogger("coxswain.worker")

WAITING_RECHECK_S = 1.0  # how often tasks waiting for parent shards ask again
# Gained tasks restore side by side (``restore_groups``): a survivor restoring 100 MB
# must not make the other tasks it gains from a killed worker wait for that restore.
RESTORE_THREADS = 4


class HandingOver:
    """What this processor is handing over now, for its heartbeats (the stat
    ``handingOver``: the leader extends a barrier for a processor that reports it,
    ``coordinator.lifecycle.handing_over``). Set while lost tasks stop and their last
    commit is awaited, cleared once the version is acknowledged."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now: dict[str, Any] | None = None

    def begin(self, version: int, tasks: int) -> None:
        with self._lock:
            self._now = {"version": version, "tasks": tasks, "since": round(time.time(), 3)}

    def end(self) -> None:
        with self._lock:
            self._now = None

    def stat(self) -> dict[str, Any] | None:
        """The heartbeat stat, or None while nothing is handed over."""
        with self._lock:
            return None if self._now is None else dict(self._now)


class QueryDied(RuntimeError):
    """The worker's query died in the app's own code, or of other failures more often
    than its restarts allow: the worker ends (its tasks handed over)."""


class QueryRestarts:
    """The query's restarts after failures not in the app's code, for the heartbeat
    stats (``queryRestarts``, ``lastQueryRestart``); kept across leases."""

    def __init__(self, restarts: Restarts, app_files: tuple[str, ...]) -> None:
        self.restarts = restarts
        self.app_files = app_files
        self._lock = threading.Lock()
        self._last: dict[str, Any] | None = None

    def record(self, cause: str) -> None:
        with self._lock:
            self._last = {"at": round(time.time(), 3), "cause": cause}

    def stats(self) -> dict[str, Any]:
        """Nothing until the first restart."""
        with self._lock:
            if self._last is None:
                return {}
            return {"queryRestarts": self.restarts.total, "lastQueryRestart": dict(self._last)}


class NotAStatefulJob(Exception):
    """A stateful worker under a coordinator run without ``--stateful``: its checkpoints
    name no ``stateSources``, so after a factor change the new tasks would start with
    empty state and count wrongly, without a word. Refused before any task runs."""


def check_stateful(checkpoints: dict[str, Any], names: set[str]) -> None:
    """Raise :class:`NotAStatefulJob` unless every checkpoint of ``names`` comes from a
    stateful coordinator (it always names the snapshots a task's state comes from, an
    empty list for a task with none)."""
    lacking = sorted(n for n in names if "stateSources" not in checkpoints.get(n, {}))
    if lacking:
        raise NotAStatefulJob(
            f"this worker is --stateful but the coordinator is not: its checkpoints (of "
            f"{', '.join(lacking[:3])}{', ...' if len(lacking) > 3 else ''}) name no "
            "stateSources, so tasks of a new elasticity factor would start with empty "
            "state. Start the coordinator with --stateful (or this worker without it)")


def split_parents(reads: Mapping[str, AbstractSet[tuple[str, int]]], lost: AbstractSet[str],
                  gained: Sequence[AbstractSet[tuple[str, int]]]) -> dict[str, int]:
    """The lost tasks whose snapshots the gained tasks here are composed from, guessed by
    the partitions (``reads``: task -> (topic, partition)s) each reads, with the copies
    of its last snapshot the compositions link ahead: a factor split's parent (more
    tasks gained than lost on its partitions), one a child (its live store; its first
    snapshot is linked once it runs), and a factor merge's child (fewer), one (the
    merged store's root or a part). Only a guess, made before the checkpoints say: a
    copy is used only for the very snapshot they name (``worker.state.staging``)."""
    out: dict[str, int] = {}
    for parent in lost:
        mine = reads.get(parent)
        if not mine:
            continue
        siblings = sum(1 for task in lost if reads.get(task) == mine)
        children = sum(1 for r in gained if r == mine)
        if children > siblings:
            out[parent] = children // siblings
        elif 0 < children < siblings:
            out[parent] = 1
    return out


def active_tasks(model: dict[str, Any], processor_id: str) -> dict[str, Any]:
    """This processor's active tasks in ``model`` (name -> task JSON)."""
    tasks = model["containers"].get(processor_id, {}).get("tasks", {})
    return {n: t for n, t in tasks.items() if t.get("taskMode", "Active") == "Active"}


class Handover:
    """Applies each job model to the running tasks."""

    def __init__(self, client: CoordinatorClient, processor_id: str, runner: BatchRunner,
                 query: SourceQuery, states: StateKeeping | None, follower: ModelFollower,
                 commit_wait_s: float, fencing: Fencing | None = None,
                 handing_over: HandingOver | None = None,
                 restarts: QueryRestarts | None = None) -> None:
        self._client = client
        self._restarts = restarts
        self._handing_over = handing_over or HandingOver()
        self._pid = processor_id
        self._runner = runner
        self._query = query
        self._states = states
        self._follower = follower
        self._commit_wait_s = commit_wait_s
        self._fencing = fencing  # exactly-once output: who to fence before each ack
        self._done: Callable[[], bool] = lambda: False
        self._acked = 0
        self._restoring: dict[str, Future[QueryPlan]] = {}
        self._waiting: set[str] = set()
        self._finished: set[str] = set()  # every key space read to its end already
        self._checked = 0.0  # when the waiting tasks were last asked about
        self._pool = ThreadPoolExecutor(RESTORE_THREADS, thread_name_prefix="restore")
        self._restore_failures = 0
        # after a failed restore or a query restart: gained tasks planned from then on
        self._retry_at = 0.0

    def run(self, done: Callable[[], bool]) -> None:
        """Until ``done()`` (the lease is over, or the worker stops)."""
        seen: tuple[int, str] | None = None
        self._done = done
        try:
            while not done():
                model = self._follower.wait(seen, 0.5)
                self._recover_query()
                if model is None or done():
                    continue
                seen = (int(model["version"]), str(model["barrier"]))
                self._step(model)
        finally:
            self._handing_over.end()
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _recover_query(self) -> None:
        """When the query died: end the worker if the app's code failed (or restarts are
        spent), else drop the query and run every task again from its checkpoint in a
        new one, as a handover to this very processor would (its lease and tasks kept:
        the coordinator sees nothing but a pause in commits)."""
        text = self._query.failure()
        if text is None:
            return
        if self._restarts is None:
            raise QueryDied(f"the query died: {text}")
        failure = classify(text, self._restarts.app_files)
        if failure.in_app:
            log.debug("the query's failure, whole: %s", text)
            raise QueryDied("the query died in the app's code (Spark's whole error at "
                            f"--log-level DEBUG):\n{python_traceback(text)}")
        delay = self._restarts.restarts.next_delay(time.monotonic())
        policy = self._restarts.restarts.policy
        if delay is None:
            raise QueryDied(
                f"the query died {policy.max_restarts + 1} times within "
                f"{policy.window_s:.0f}s of failures outside the app's code (restarted "
                f"{policy.max_restarts} times: --query-restarts); the last: {text}")
        tasks = self._runner.running.tasks
        log.warning("the query died, not in the app's code (%s): a new query in %.1fs "
                    "runs its %d tasks from their checkpoints (restart %d; at most %d "
                    "within %.0fs)", failure.summary, delay, len(tasks),
                    self._restarts.restarts.total, policy.max_restarts, policy.window_s)
        log.debug("the query's failure, whole: %s", text)
        self._restarts.record(failure.summary)
        if tasks:  # as lost tasks: stopped, their last commit awaited
            self._runner.remove(tasks)
            if not self._runner.flush(self._commit_wait_s):
                log.error("the last commit of %d tasks not done within %.0fs (%s): they "
                          "start from the commit before", len(tasks), self._commit_wait_s,
                          self._runner.committer.last_failure)
                self._runner.committer.forget(tasks)
        self._restoring.clear()  # (restores under way end unused: planned again)
        self._query.forget()
        self._runner.query_restarted()
        # the next steps find every task of the model gained, planned from checkpoints
        # once the pause is over (as after a failed restore); new versions are acked
        # meanwhile, so the pause never holds a barrier up
        self._retry_at = max(self._retry_at, time.monotonic() + delay)

    def _step(self, model: dict[str, Any]) -> None:
        version = int(model["version"])
        mine = active_tasks(model, self._pid)
        lost = self._runner.running.tasks - set(mine)
        if lost:  # 1. stop them now, and wait for their last commit
            log.info("version %d: handing over %s", version, ", ".join(sorted(lost)[:10]))
            self._handing_over.begin(version, len(lost))
            started = time.monotonic()
            parents = self._split_parents(mine, lost)
            self._runner.remove(lost)
            removed = time.monotonic()
            if isinstance(self._states, TaskStates):
                # their children's copies of the last snapshot, linked beside the commit
                for parent, copies in parents.items():
                    self._states.stage(parent, copies)
            flushed = self._runner.flush(self._commit_wait_s)
            log.info("version %d: %d tasks handed over: their batch ended in %.2fs, its "
                     "commit %.2fs later", version, len(lost), removed - started,
                     time.monotonic() - removed)
            if not flushed:
                if self._fencing is not None:
                    # exactly-once: acking now would let the next owners start while this
                    # commit's transaction may still commit. Registering again fences it
                    # (this processor's next incarnation takes its transactional id over)
                    raise Fenced(409, "fenced", (
                        f"version {version}: the last commit of {len(lost)} tasks handed "
                        f"over did not end within {self._commit_wait_s:.0f}s; registering "
                        "again, which aborts its transaction, instead of acking without "
                        "it"))
                log.error("version %d: last commit of %d tasks not done within %.0fs (%s); "
                          "handing over without it", version, len(lost),
                          self._commit_wait_s, self._runner.committer.last_failure)
                # and for good: a retry of it landing after the next owners read their
                # checkpoints would pair their state with offsets it does not hold
                self._runner.committer.forget(lost)
        for name in [n for n in self._restoring if n not in mine]:
            del self._restoring[name]  # its restore ends unused
        self._waiting &= set(mine)
        self._finished &= set(mine)
        if version > self._acked:  # 2. the barrier's promise
            try:
                self._ack(model)
            finally:
                self._handing_over.end()
            self._acked = version
        else:
            self._handing_over.end()
        if model["barrier"] != "done" or version != self._acked:
            return
        if self._query.query is None:
            self._warm(model)
        # 3. the gained tasks first: their checkpoints are read while the batch in
        # flight runs, and they join (committing every task under this version) as it
        # ends, so the next batch reads them
        self._finish_restores(model, mine)
        gained = (set(mine) - self._runner.running.tasks - set(self._restoring)
                  - self._waiting - self._finished)
        due = self._waiting if time.monotonic() - self._checked >= WAITING_RECHECK_S else set()
        if (gained or due) and time.monotonic() >= self._retry_at:
            self._plan(model, mine, gained | due)
        if self._runner.running.tasks and self._runner.running.plan.version < version:
            self._runner.retag(version)  # nothing gained: commit under the version in force

    def _split_parents(self, mine: dict[str, Any], lost: AbstractSet[str]) -> dict[str, int]:
        """:func:`split_parents` of this handover (none unless the state is kept here)."""
        if not isinstance(self._states, TaskStates):
            return {}
        old: dict[str, set[tuple[str, int]]] = {}
        for start in self._runner.running.plan.starts:
            old.setdefault(start.task, set()).add((start.topic, start.partition))
        running = self._runner.running.tasks
        return split_parents(old, lost, [
            {(str(ssp["stream"]), int(ssp["partition"]))
             for ssp in task.get("systemStreamPartitions", ())}
            for name, task in mine.items() if name not in running])

    def _warm(self, model: dict[str, Any]) -> None:
        """A worker holding standby copies and no query yet (it joined, and its tasks
        warm up here before they move): start the query, reading nothing, so that the
        tasks do not wait for it when they come."""
        tasks = model["containers"].get(self._pid, {}).get("tasks", {})
        for task in tasks.values():
            if task.get("taskMode") == "Standby":
                for ssp in task.get("systemStreamPartitions", ()):
                    self._query.warm(str(ssp["system"]), str(ssp["stream"]))
                    return

    def _ack(self, model: dict[str, Any]) -> None:
        if self._pid not in model["containers"]:
            return  # a version generated before this processor joined
        if self._fencing is not None:
            self._fence(model)
        try:
            self._client.ack(self._pid, int(model["version"]))
        except CoordinatorError as e:
            if e.code != "not_a_participant":
                raise

    def _fence(self, model: dict[str, Any]) -> None:
        """Exactly-once output: fence the processors ``model`` lists, and recover what they
        committed, before acking it; retried until it succeeds (without it the ack would
        let their tasks start while they may still write)."""
        assert self._fencing is not None
        delay = 0.5
        while True:
            try:
                self._fencing.before_ack(model)
                return
            except CoordinatorError:
                raise
            except Exception as e:  # the broker unreachable: the ack waits for it
                if self._done():
                    raise
                log.warning("version %s: fencing %s failed (%s: %s); trying again in %.1fs",
                            model["version"], model["config"].get("fencedProcessors"),
                            type(e).__name__, str(e)[:200], delay)
                time.sleep(delay)
                delay = min(5.0, delay * 2)

    def _plan(self, model: dict[str, Any], mine: dict[str, Any], names: set[str]) -> None:
        """Plan ``names`` from their resolved checkpoints: waiting, restoring, or running
        at once (a stateless worker)."""
        self._checked = time.monotonic()
        try:
            checkpoints = self._client.checkpoints(sorted(names))
        except CoordinatorError as e:  # a newer version replaced this one meanwhile
            log.info("version %s: checkpoints not readable (%s)", model["version"], e)
            return
        scoped = {**model, "containers": {self._pid: {"tasks": {n: mine[n] for n in names}}}}
        plan = plan_query(scoped, self._pid, checkpoints)
        newly_waiting = set(plan.waiting) - self._waiting
        if newly_waiting:
            log.info("version %d: %d tasks wait for parent shards: %s", plan.version,
                     len(newly_waiting), ", ".join(sorted(newly_waiting)[:10]))
        self._waiting = (self._waiting - names) | set(plan.waiting)
        ready = {s.task for s in plan.starts}
        # a task whose key spaces are all finished (a closed shard read to its end) has
        # no start: nothing to run, nothing to wait for
        self._finished |= names - ready - self._waiting
        if not ready:
            return
        if self._states is not None:
            check_stateful(checkpoints, ready)
            if isinstance(self._states, ExecutorStates) and plan.system == "kinesis":
                # executor-kept state measures standby lags in offsets; Kinesis lags
                # are milliseconds (``tasks.shard_lag``), and the pairing is untested
                raise NotAStatefulJob(
                    "a stateful job on Kinesis runs on a local Spark master only "
                    "(--spark-master local[N]) for now: on a cluster master its state "
                    "would be kept by the executors, which do not measure Kinesis lags")
        log.info("version %d: starting %s", plan.version, ", ".join(sorted(ready)[:10]))
        if self._states is None:
            self._add(only(plan, ready))
            return
        states = self._states
        keep = set(self._runner.running.tasks) | set(self._restoring) | ready
        subset = {n: checkpoints.get(n, {}) for n in ready}
        for group in restore_groups(subset):
            future = self._pool.submit(self._restore, states, plan, group,
                                       {n: subset[n] for n in group}, keep)
            future.add_done_callback(lambda _: self._follower.poke())  # run them at once
            for name in group:
                self._restoring[name] = future

    @staticmethod
    def _restore(states: StateKeeping, plan: QueryPlan, group: set[str],
                 checkpoints: dict[str, Any], keep: set[str]) -> QueryPlan:
        states.restore(checkpoints, keep)
        return only(plan, group)

    def _finish_restores(self, model: dict[str, Any], mine: dict[str, Any]) -> None:
        """Run the tasks whose state is restored (those still this processor's)."""
        finished = {f for f in self._restoring.values() if f.done()}
        for future in finished:
            names = {n for n, f in self._restoring.items() if f is future}
            for name in names:
                del self._restoring[name]
            try:
                plan = future.result()
            except Exception as e:  # the blob store down, say: planned again, later
                self._restore_failures += 1
                delay = min(10.0, 0.5 * 2 ** min(self._restore_failures, 5))
                self._retry_at = time.monotonic() + delay
                log.warning("version %s: restoring %s failed (%s: %s); trying again in "
                            "%.1fs", model["version"], ", ".join(sorted(names)[:5]),
                            type(e).__name__, str(e)[:300], delay)
                continue
            self._restore_failures = 0
            still = names & set(mine)
            if still:
                self._add(only(plan, still))

    def _add(self, plan: QueryPlan) -> None:
        running = self._runner.add(plan)
        log.info("version %d: running %s; source plan %d: %s", plan.version,
                 ", ".join(f"{s.task} from {s.partition}:{s.start}" for s in sorted(
                     plan.starts, key=lambda s: (s.task, s.partition))[:10])
                 + (f" (skips {[(w.partition, w.factor, w.bucket, w.offset) for w in plan.skips]})"
                    if plan.skips else ""),
                 running.source.version,
                 {k: (p.start, p.generation) for k, p in sorted(
                     running.source.partitions.items())[:10]})

