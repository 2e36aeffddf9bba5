"""The worker's control plane, each part on a thread of its own so that none holds up
another (a 100 MB restore never silences the long poll; a slow commit never delays a
heartbeat): the job model follower (a long poll always open: the coordinator takes its
connection closing as a sign of death), the heartbeats (lags and stats), and the state
keeper (standby copies, lags, the blob store's collection). Each ends when the lease
does (``lease_over``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from grouping.task_names import parse_standby_task_name
from worker.client import CoordinatorClient, CoordinatorError, Fenced, LeaseLost
from worker.state.remote import StateKeeping

log = logging.getLogger("coxswain.worker")

POLL_WAIT_MS = 10_000  # a long poll's wait; the coordinator answers any change at once
MAX_LAG = 2**63 - 1  # what a lag may be (int64, as the coordinator takes them)


class ModelFollower:
    """The latest job model this processor's long poll has seen (its own container),
    with its barrier state."""

    def __init__(self, client: CoordinatorClient, processor_id: str,
                 lease_over: threading.Event) -> None:
        self._client = client
        self._pid = processor_id
        self._over = lease_over
        self._changed = threading.Condition()
        self.latest: dict[str, Any] | None = None
        self._poked = False
        self._thread = threading.Thread(target=self._run, name="model-follower",
                                        daemon=True)

    def start(self) -> ModelFollower:
        self._thread.start()
        return self

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def wait(self, seen: tuple[int, str] | None, timeout_s: float) -> dict[str, Any] | None:
        """The latest model once it differs from ``seen`` (version, barrier), or when
        poked, or after ``timeout_s``, as it is."""
        with self._changed:
            self._changed.wait_for(lambda: self._key() != seen or self._poked
                                   or self._over.is_set(), timeout_s)
            self._poked = False
            return self.latest

    def poke(self) -> None:
        """Wake :meth:`wait` now (something else changed: a restore finished)."""
        with self._changed:
            self._poked = True
            self._changed.notify_all()

    def _key(self) -> tuple[int, str] | None:
        m = self.latest
        return None if m is None else (int(m["version"]), str(m["barrier"]))

    def _set(self, model: dict[str, Any]) -> None:
        with self._changed:
            self.latest = model
            self._changed.notify_all()

    def _run(self) -> None:
        delay = 0.5
        while not self._over.is_set():
            try:
                latest = self.latest
                if latest is None:
                    found = self._client.job_model(self._pid, since=None)
                    if found is None:
                        self._over.wait(0.5)
                        continue
                else:
                    pending = "pending" if latest["barrier"] == "pending" else None
                    found = self._client.job_model(self._pid, since=int(latest["version"]),
                                                   wait_ms=POLL_WAIT_MS, barrier=pending)
                if found is not None:
                    self._set(found)
                delay = 0.5
            except (LeaseLost, Fenced) as e:
                log.error("lease lost (%s): stopping processing and registering again", e)
                self._over.set()
            except Exception as e:  # the coordinator unreachable for long: go on trying
                log.warning("job model poll failed: %s", e)
                self._over.wait(delay)
                delay = min(5.0, delay * 2)
        with self._changed:
            self._changed.notify_all()


class Heartbeats:
    """Renews the lease every interval (at once after a reconnection), with the state
    lags and the stats."""

    def __init__(self, client: CoordinatorClient, processor_id: str, interval_s: float,
                 lease_over: threading.Event, lags: Callable[[], dict[str, int] | None],
                 stats: Callable[[], dict[str, Any]]) -> None:
        self._client = client
        self._pid = processor_id
        self._interval_s = interval_s
        self._over = lease_over
        self._lags = lags
        self._stats = stats
        self.now = threading.Event()  # heartbeat now, not at the next interval
        self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)

    def start(self) -> Heartbeats:
        self._client.reconnected = self.now.set
        self._thread.start()
        return self

    def join(self, timeout_s: float) -> None:
        self.now.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            self.now.wait(self._interval_s)
            self.now.clear()
            if self._over.is_set():
                return
            try:
                lags = self._lags()
                if lags is not None:  # int64 offsets or milliseconds; never more
                    lags = {t: min(max(0, lag), MAX_LAG) for t, lag in lags.items()}
                self._client.heartbeat(self._pid, task_lags=lags, stats=self._stats())
            except (LeaseLost, Fenced) as e:
                log.error("lease lost (%s): stopping processing and registering again", e)
                self._over.set()
                return
            except Exception as e:
                log.warning("heartbeat failed: %s", e)


class StateKeeper:
    """Stateful workers: keeps standby copies fresh and the lags current, beside the
    heartbeats (a download must never delay a heartbeat), and collects the blob store
    when the coordinator names this processor the collector."""

    def __init__(self, states: StateKeeping, client: CoordinatorClient, processor_id: str,
                 interval_s: float, lease_over: threading.Event,
                 actives: Callable[[], list[str]],
                 model: Callable[[], dict[str, Any] | None]) -> None:
        self._states = states
        self._client = client
        self._pid = processor_id
        self._interval_s = interval_s
        self._over = lease_over
        self._actives = actives
        self._model = model
        self.lags: dict[str, int] = {}
        self._thread = threading.Thread(target=self._run, name="state-keeper", daemon=True)

    def start(self) -> StateKeeper:
        self._thread.start()
        return self

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def _run(self) -> None:
        states = self._states
        gc_every = states.config.gc_interval_s
        next_gc = time.monotonic() + gc_every
        while not self._over.wait(self._interval_s):
            if gc_every > 0 and time.monotonic() >= next_gc:
                next_gc = time.monotonic() + gc_every
                self._collect()
            model = self._model()
            if model is None:
                continue
            tasks = model["containers"].get(self._pid, {}).get("tasks", {})
            standbys = sorted({parsed[0] for name, t in tasks.items()
                               if t.get("taskMode") == "Standby"
                               and (parsed := parse_standby_task_name(name)) is not None})
            try:
                self.lags = states.refresh(self._actives(), standbys,
                                           self._client.checkpoints)
            except Exception as e:  # the next round tries again
                log.warning("state refresh failed: %s", e)

    def _collect(self) -> None:
        try:
            collector, tasks = self._client.state_markers()
            if collector == self._pid:
                self._states.collect_garbage(tasks)
        except Exception as e:  # the next interval tries again
            log.warning("blob store collection failed: %s", e)


__all__ = ["CoordinatorError", "Heartbeats", "ModelFollower", "StateKeeper"]
