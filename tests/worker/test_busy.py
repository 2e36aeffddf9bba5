"""The busy share a worker reports (pure): recent batch time over the window, falling to
zero when no batch runs."""

from __future__ import annotations

from typing import Any

from service.autosize.window import sample_of
from worker.busy import BusyMeter


def test_busy_share_over_the_window_and_idle_decay() -> None:
    meter = BusyMeter(window_s=10)
    for t in range(0, 10, 2):  # a 1 s batch every 2 s
        meter.record(100 + t, 101 + t)
    assert meter.share(110) == 0.5
    assert meter.share(115) == 0.2  # two batches left in the window
    assert meter.share(125) == 0.0  # idle: nothing ran for 10 s


def test_a_sample_prefers_the_measured_busy_share() -> None:
    stats: dict[str, dict[str, Any]] = {
        "w1": {"recordsPerSecond": 800.0, "batchSeconds": 2.0, "busy": 0.0,
               "consumerLag": {"a": 5, "b": 7}},
        "w2": {"recordsPerSecond": 200.0, "batchSeconds": 0.25, "triggerSeconds": 0.5}}
    s = sample_of(stats, 2, 4, at=1.0)
    assert (s.backlog, s.capacity, s.processors, s.factor) == (12, 1000.0, 2, 4)
    assert s.busy == 0.25  # w1 idle now (0), w2 half its trigger interval (0.5)
    assert s.consumed == 100.0
