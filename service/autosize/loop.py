"""``coxswain autosize``: reads ``GET /autosize`` on an interval and, with ``--apply``,
changes the elasticity factor, with hysteresis (the same direction recommended
``confirmations`` times in a row) and a cooldown (at most one change per
``cooldown_s``); never down while the backlog grows. Every decision is logged with its
figures. The processor count is only reported: scaling processors is the deployment's
(its autoscaler reads ``coxswain_recommended_processors``)."""

from __future__ import annotations

import logging
import math
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

log = logging.getLogger("coxswain.autosize")


@dataclass
class Applier:
    """When to act on a recommendation (pure: time is given)."""

    cooldown_s: float = 300.0
    confirmations: int = 2
    _last_change: float = -math.inf
    _direction: int = 0
    _streak: int = 0

    def decide(self, answer: Mapping[str, Any], now: float) -> tuple[int | None, str]:
        """The factor to set now (or None), and why."""
        current = int(answer["currentElasticityFactor"])
        target = int(answer["elasticityFactor"])
        if not answer.get("decided"):
            self._direction = self._streak = 0
            return None, "no decision: " + str(answer.get("reason"))
        if target == current:
            self._direction = self._streak = 0
            return None, "keep " + str(current)
        trend = float((answer.get("figures") or {}).get("backlogTrend", 0.0))
        if target < current and trend > 0:
            self._direction = self._streak = 0
            return None, f"not scaling down to {target}: the backlog grows ({trend:+.1f}/s)"
        direction = 1 if target > current else -1
        self._streak = self._streak + 1 if direction == self._direction else 1
        self._direction = direction
        if self._streak < self.confirmations:
            return None, (f"{target} recommended {self._streak} time(s) in a row; waiting "
                          f"for {self.confirmations}")
        wait = self._last_change + self.cooldown_s - now
        if wait > 0:
            return None, f"{target} recommended; cooling down for {wait:.0f}s more"
        self._last_change = now
        self._direction = self._streak = 0
        return target, f"scale {current} -> {target}"


def run(url: str, token: str | None, apply: bool, interval_s: float, min_factor: int | None,
        max_factor: int | None, applier: Applier,
        keep_going: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
        verify: ssl.SSLContext | bool = True) -> None:
    """Follow the recommendation until ``keep_going()`` is false (``verify``: what the
    coordinator's HTTPS certificate is checked with)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    params = {k: v for k, v in (("minFactor", min_factor), ("maxFactor", max_factor)) if v}
    with httpx.Client(base_url=url, headers=headers, timeout=30, verify=verify) as http:
        while keep_going():
            try:
                answer = http.get("/autosize", params=params)
                answer.raise_for_status()
                body = answer.json()
                factor, why = applier.decide(body, clock())
                log.info("%s | recommended factor %s, processors %s; %s | figures %s", why,
                         body["elasticityFactor"], body["processors"], body["reason"],
                         body.get("figures"))
                if factor is not None and apply:
                    done = http.post("/scale", json={"elasticityFactor": factor})
                    if done.status_code == 202:
                        log.info("POST /scale %d: job model version %s", factor,
                                 done.json().get("jobModelVersion"))
                    else:
                        log.warning("POST /scale %d refused: %s %s", factor,
                                    done.status_code, done.text)
                elif factor is not None:
                    log.info("would POST /scale %d (run with --apply to act)", factor)
            except (httpx.HTTPError, ValueError, KeyError) as e:
                log.warning("autosize round failed: %s", e)
            sleep(interval_s)
