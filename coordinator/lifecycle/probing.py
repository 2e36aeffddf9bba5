"""Probing rebalances (KIP-441): while the assignment keeps tasks on caught-up processors
and warms their copies up elsewhere, the leader regenerates on a timer, and as soon as
heartbeats show a warm-up caught up (KAFKA-10199: scale-out should not wait for the
timer)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from coordinator.clock import Clock
from coordinator.leadership.role import LeaderRole
from coordinator.lifecycle.config import CoordinatorConfig
from coordinator.membership import Membership

log = logging.getLogger("coxswain.coordinator")

Schedule = Callable[[str, float, Callable[[], Awaitable[None]]], None]
TIMER = "probing"


class Probing:
    """What the latest assignment asked for (probing, warm-ups) and when it last probed;
    ``rebalance(reason)`` generates a version."""

    def __init__(self, config: CoordinatorConfig, membership: Membership, leader: LeaderRole,
                 clock: Clock, schedule: Schedule, cancel: Callable[[str], None],
                 rebalance: Callable[[str], Awaitable[object]]) -> None:
        self._config = config
        self._membership = membership
        self._leader = leader
        self._clock = clock
        self._schedule = schedule
        self._cancel = cancel
        self._rebalance = rebalance
        self.wanted = False
        self.warmups: frozenset[tuple[str, str]] = frozenset()  # (task, processor)
        self._last_probe = float("-inf")

    def assigned(self, wanted: bool, warmups: frozenset[tuple[str, str]]) -> None:
        """A new assignment: probe on the timer while it asks for probing rebalances."""
        self.wanted, self.warmups = wanted, warmups
        if wanted:
            self._schedule(TIMER, self._config.probing_interval_s, self._probe)
        else:
            self._cancel(TIMER)

    async def _probe(self) -> None:
        self._last_probe = self._clock.now()
        await self._rebalance("probing")

    def probe_if_warm(self) -> None:
        """Leader, at each lease sweep: a warm-up whose state caught up (its processor
        reports a lag within the acceptable recovery lag) gets its probing rebalance now,
        rate-limited, instead of at the probing timer."""
        if not (self.wanted and self.warmups and self._leader.is_leader()):
            return
        config = self._config
        if config.probing_min_interval_s >= config.probing_interval_s:
            return  # configured as timer only: the timer always comes first
        if self._clock.now() - self._last_probe < config.probing_min_interval_s:
            return
        lags = self._membership.task_lags()
        acceptable = config.assignment.acceptable_recovery_lag
        warm = sorted((task, pid) for task, pid in self.warmups
                      if lags.get(pid, {}).get(task, acceptable + 1) <= acceptable)
        if warm:
            log.info("warm-ups caught up (%s): probing rebalance now",
                     ", ".join(f"{t} on {p}" for t, p in warm[:5]),
                     extra={"reason": "probing"})
            self._last_probe = self._clock.now()
            self._schedule(TIMER, 0.0, self._probe)
