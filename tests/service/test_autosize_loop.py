"""``coxswain autosize``: when it acts (pure: hysteresis, cooldown, never down while the
backlog grows; property-tested), and the loop against a real coordinator applying a
recommendation with POST /scale."""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.autosize.loop import Applier, run
from tests.service.conftest import StartServer
from tests.service.workers import SimWorker, settle


def answer(target: int, current: int, decided: bool = True, trend: float = 0.0
           ) -> dict[str, Any]:
    return {"elasticityFactor": target, "currentElasticityFactor": current,
            "decided": decided, "processors": 1, "reason": "test",
            "figures": {"backlogTrend": trend}}


@given(st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]),
                          st.booleans(), st.floats(-100, 100), st.floats(0, 50)),
                max_size=60))
def test_at_most_one_change_per_cooldown_and_never_down_while_growing(
        rounds: list[tuple[int, int, bool, float, float]]) -> None:
    applier = Applier(cooldown_s=60, confirmations=2)
    now, changes = 0.0, []
    for target, current, decided, trend, gap in rounds:
        now += gap
        factor, _ = applier.decide(answer(target, current, decided, trend), now)
        if factor is not None:
            assert decided and factor == target != current
            assert not (factor < current and trend > 0)
            changes.append(now)
    assert all(b - a >= 60 for a, b in itertools.pairwise(changes))


def test_hysteresis_then_cooldown() -> None:
    applier = Applier(cooldown_s=100, confirmations=2)
    assert applier.decide(answer(4, 2), 0)[0] is None  # once: wait
    assert applier.decide(answer(4, 2), 1)[0] == 4  # twice in a row: act
    assert applier.decide(answer(8, 4), 2)[0] is None
    factor, why = applier.decide(answer(8, 4), 3)
    assert factor is None and "cooling down" in why
    assert applier.decide(answer(1, 4, trend=5.0), 200) == (
        None, "not scaling down to 1: the backlog grows (+5.0/s)")
    assert applier.decide(answer(1, 4), 201)[0] is None  # the streak started again
    assert applier.decide(answer(1, 4), 202)[0] == 1


def test_the_loop_applies_a_recommendation(start_server: StartServer,
                                           caplog: pytest.LogCaptureFixture) -> None:
    server = start_server("--input", "kafka.orders:2", "--debounce-ms", "50",
                          "--lease-ttl-ms", "60000", "--autosize-sample-interval-ms", "100",
                          "--autosize-window-ms", "1500")
    with server.client() as c:
        w = SimWorker(c, "w1", "host-a")
        w.register()
        settle(c, [w])
        backlog = 0
        rounds = 0

        def keep_going() -> bool:  # a worker falling behind, heartbeat by heartbeat
            nonlocal backlog, rounds
            backlog += 4000
            rounds += 1
            c.post("/processors/w1/heartbeat", headers=w.lease, json={"stats": {
                "recordsPerSecond": 1000.0, "batchSeconds": 0.9, "triggerSeconds": 0.5,
                "consumerLag": {"Partition 0": backlog}}})
            return rounds < 80 and c.get("/scale").json()["elasticityFactor"] == 1

        with caplog.at_level(logging.INFO, logger="coxswain.autosize"):
            run(server.url, None, True, 0.1, None, 8, Applier(cooldown_s=60),
                keep_going=keep_going)
        assert c.get("/scale").json()["elasticityFactor"] > 1, caplog.text[-2000:]
        assert "POST /scale" in caplog.text
