"""KIP-441 scale-out without waiting for the probing timer: when heartbeats show a
warm-up caught up, the leader runs the probing rebalance then (rate-limited)."""

from __future__ import annotations

import time
from typing import Any

from tests.service.conftest import StartServer
from tests.service.workers import SimWorker, settle

ARGS = ("--input", "kafka.orders:4", "--stateful", "--debounce-ms", "50",
        "--lease-ttl-ms", "60000", "--probing-interval-ms", "600000",
        "--acceptable-recovery-lag", "100", "--probing-min-interval-ms", "300")


def standbys(model: dict[str, Any], pid: str) -> list[str]:
    tasks = model["containers"].get(pid, {}).get("tasks", {})
    return sorted(n for n, t in tasks.items() if t["taskMode"] == "Standby")


def test_a_caught_up_warm_up_is_promoted_without_waiting_for_the_probing_timer(
    start_server: StartServer,
) -> None:
    server = start_server(*ARGS)
    with server.client() as c:
        w1, w2 = SimWorker(c, "w1", "host-a"), SimWorker(c, "w2", "host-b")
        w1.register()
        first = settle(c, [w1])
        every = sorted(w1.tasks(first))
        assert len(every) == 4
        assert w1.heartbeat(dict.fromkeys(every, 0)).status_code == 200
        w2.register()  # no state anywhere: it gets warm-ups, the actives stay on w1
        second = settle(c, [w1, w2], first["version"])
        warming = standbys(second, "w2")
        assert warming and not w2.tasks(second), second["containers"]["w2"]
        assert sorted(w1.tasks(second)) == every
        # the warm-up copies catch up: w2 says so in a heartbeat
        names = [n.removeprefix("Standby-").rsplit("-", 1)[0] for n in warming]
        started = time.monotonic()
        assert w2.heartbeat(dict.fromkeys(names, 0)).status_code == 200
        w1.heartbeat(dict.fromkeys(every, 0))
        third = settle(c, [w1, w2], second["version"])
        took = time.monotonic() - started
        assert w2.tasks(third), third["containers"]  # actives moved to the warm state
        assert took < 10, took  # not the 600 s probing timer
        status = c.get("/status").json()
        assert status["lastRebalance"]["reason"] == "probing"


def test_a_rate_limit_at_the_probing_interval_leaves_probing_to_the_timer(
    start_server: StartServer,
) -> None:
    """How a benchmark measures the timer alone: no event-driven probing rebalance."""
    args = [a if a != "300" else "600000" for a in ARGS]  # min interval = probing interval
    server = start_server(*args)
    with server.client() as c:
        w1, w2 = SimWorker(c, "w1", "host-a"), SimWorker(c, "w2", "host-b")
        w1.register()
        first = settle(c, [w1])
        every = sorted(w1.tasks(first))
        assert w1.heartbeat(dict.fromkeys(every, 0)).status_code == 200
        w2.register()
        second = settle(c, [w1, w2], first["version"])
        warming = standbys(second, "w2")
        assert warming and not w2.tasks(second), second["containers"]["w2"]
        names = [n.removeprefix("Standby-").rsplit("-", 1)[0] for n in warming]
        for _ in range(4):  # heartbeats say the warm-ups are caught up, again and again
            assert w2.heartbeat(dict.fromkeys(names, 0)).status_code == 200
            w1.heartbeat(dict.fromkeys(every, 0))
            time.sleep(0.5)
        assert c.get("/jobmodel").json()["version"] == second["version"]
