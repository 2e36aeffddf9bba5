"""The autosizer end to end (real Kafka, coordinator and a Spark worker; ``coxswain
autosize --apply``'s loop): input faster than factor 1 can process makes it scale the
factor up while the backlog grows; once the input stops it scales back down; no more
changes than the cooldown allows; every record processed, per key in order."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from service.autosize.loop import Applier, run
from service.local.kafka import LocalKafka
from tests.service.conftest import StartServer
from tests.worker.test_end_to_end import (
    Producing,
    coordinator_for,
    new_topics,
    read_all,
    start_worker,
    stop_workers,
    wait_output,
)

pytestmark = pytest.mark.slow
COOLDOWN_S = 15.0


def test_a_load_ramp_scales_up_and_an_idle_job_scales_back_down(
    start_server: StartServer, kafka: LocalKafka, tmp_path: Path,
) -> None:
    topic, output = new_topics(kafka, 1)
    producing = Producing(kafka, topic)
    server = coordinator_for(start_server, kafka, topic, "--lease-ttl-ms", "20000",
                             "--autosize-sample-interval-ms", "1000",
                             "--autosize-window-ms", "12000")
    worker = start_worker(tmp_path, server.url, kafka, output, "w0", "--api", "task",
                          "--output-topic", output,
                          app="tests.worker.apps:slow_echo_task")
    factors: list[tuple[float, int]] = []  # (when, factor) after each change
    stop = threading.Event()
    with server.client() as c:
        def keep_going() -> bool:
            factor = c.get("/scale").json()["elasticityFactor"]
            if not factors or factors[-1][1] != factor:
                factors.append((time.monotonic(), factor))
            return not stop.is_set()

        sizer = threading.Thread(target=run, daemon=True, kwargs={
            "url": server.url, "token": None, "apply": True, "interval_s": 1.0,
            "min_factor": None, "max_factor": 4,
            "applier": Applier(cooldown_s=COOLDOWN_S, confirmations=2),
            "keep_going": keep_going})
        try:
            producing.send(10)
            wait_output(kafka, output, producing.total)  # the worker runs
            sizer.start()
            ramp_end = time.monotonic() + 45
            # 400 records/s, more than factor 1 does, until the sizer scales up (2 s more
            # of it then: the new factor gets a backlog too)
            scaled_at: float | None = None
            while time.monotonic() < min(ramp_end, (scaled_at or ramp_end) + 2):
                producing.send(40)
                time.sleep(0.1)
                if scaled_at is None and factors and max(f for _, f in factors) >= 2:
                    scaled_at = time.monotonic()
            stopped_at = time.monotonic()
            assert max(f for _, f in factors) >= 2, factors  # scaled up under the load
            deadline = stopped_at + 150
            while time.monotonic() < deadline and factors[-1][1] >= max(
                    f for _, f in factors):
                time.sleep(1)
            assert factors[-1][1] < max(f for _, f in factors), factors  # back down
            wait_output(kafka, output, producing.total)
        finally:
            stop.set()
            if sizer.is_alive():
                sizer.join(30)
            stop_workers([worker])
    changes = [t for t, _ in factors[1:]]
    # at most one change per cooldown (as seen by polling /scale once a round)
    assert all(b - a >= COOLDOWN_S - 1.5 for a, b in itertools.pairwise(changes)), factors
    check_order(read_all(kafka, output), producing)


def check_order(records: list[dict[str, Any]], producing: Producing) -> None:
    per_key: dict[str, list[int]] = {}
    seen: set[tuple[str, int]] = set()
    for r in records:
        if (r["key"], r["seq"]) not in seen:
            seen.add((r["key"], r["seq"]))
            per_key.setdefault(r["key"], []).append(r["seq"])
    assert {k: sorted(v) for k, v in per_key.items()} == {
        k: list(range(n)) for k, n in producing.seq.items()}  # nothing lost
    for key, seqs in per_key.items():
        assert seqs == sorted(seqs), (key, seqs[:20])
