"""Hostile or broken heartbeats are refused at the edge, before anything is written, and
cannot grow the store, /status or /metrics without bound."""

from __future__ import annotations

import json

import httpx

from tests.service.conftest import StartServer
from tests.service.workers import SimWorker, joined

ARGS = ("--input", "kafka.orders:2", "--debounce-ms", "50", "--lease-ttl-ms", "60000")


def _raw_heartbeat(c: httpx.Client, body: str) -> tuple[int, str]:
    r = c.post("/processors/w1/heartbeat", content=body,
               headers={"content-type": "application/json", **SimWorker.lease_of("w1")})
    return r.status_code, r.text


def test_out_of_range_lags_and_oversized_or_deep_stats_are_left_out_and_the_lease_kept(
    start_server: StartServer,
) -> None:
    """One bad value must not cost a worker its lease (a Kinesis worker's sequence-number
    lag once did): the heartbeat renews it, and what is out of bounds is clamped or left
    out, named in the answer's ``warnings`` and logged; nothing of it is stored."""
    server = start_server(*ARGS)
    with server.client() as c:
        w1, _ = joined(c, "w1", "host-a")
        assert w1.heartbeat({"Partition 0": 5}).status_code == 200
        assert "warnings" not in w1.heartbeat({"Partition 0": 5}).json()
        huge = '{"taskLags": {"Partition 0": 1' + "0" * 400 + ', "Partition 1": 3}}'
        status, text = _raw_heartbeat(c, huge)
        assert status == 200 and "counted as 2^63-1" in text, text
        metrics = c.get("/metrics").text
        assert f'coxswain_task_lag{{processor="w1",task="Partition 0"}} {float(2**63 - 1)}' \
            in metrics or 'task="Partition 0"} 9.223372036854776e+18' in metrics, metrics
        assert 'coxswain_task_lag{processor="w1",task="Partition 1"} 3.0' in metrics
        deep = '{"stats": ' + '{"a": ' * 300 + "1" + "}" * 300 + "}"
        status, text = _raw_heartbeat(c, deep)
        assert status == 200 and "stats dropped" in text, text
        big = json.dumps({"taskLags": {"Partition 0": 5}, "stats": {"blob": "x" * 100_000}})
        status, text = _raw_heartbeat(c, big)
        assert status == 200 and "at most 65536 bytes" in text, text
        bad = w1.heartbeat({"Partition 0": -1, "Partition 1": "7", "x" * 600: 1})  # type: ignore[dict-item]
        assert bad.status_code == 200
        assert len(bad.json()["warnings"]) == 3, bad.json()
        # nothing of those was written: /status answers, the last good values stand
        status_page = c.get("/status")
        assert status_page.status_code == 200, status_page.text
        assert "xxxxxxxxxx" not in json.dumps(status_page.json())
        w1_status = status_page.json()["processors"][0]
        assert w1_status["taskLags"] == {}  # the last heartbeat's lags: all dropped
        assert w1.heartbeat({"Partition 0": 5}).status_code == 200
        metrics = c.get("/metrics").text
        assert 'coxswain_task_lag{processor="w1",task="Partition 0"} 5.0' in metrics
        # and still refused whole: what is not a heartbeat at all
        status, text = _raw_heartbeat(c, '{"taskLags": [1, 2]}')
        assert status == 422, text
        status, text = _raw_heartbeat(c, '{"lags": {}}')
        assert status == 422, text
        assert "heartbeat of w1: lag of task 'Partition 0' above 2^63-1" in server.log()


def test_lags_of_unknown_tasks_are_dropped_and_series_leave_with_their_processor(
    start_server: StartServer,
) -> None:
    server = start_server(*ARGS)
    with server.client() as c:
        w1, _ = joined(c, "w1", "host-a")
        invented = {f"invented-{i}": i for i in range(60_000)}
        beat = w1.heartbeat({**invented, "Partition 1": 7})
        assert beat.status_code == 200, beat.text
        metrics = c.get("/metrics").text
        assert "invented-" not in metrics
        assert 'coxswain_task_lag{processor="w1",task="Partition 1"} 7.0' in metrics
        assert len(metrics) < 100_000
        assert w1.leave().status_code == 204
        assert 'processor="w1"' not in c.get("/metrics").text


def test_state_restores_reported_in_stats_are_exported_for_known_tasks_only(
    start_server: StartServer,
) -> None:
    server = start_server(*ARGS)
    with server.client() as c:
        w1, _ = joined(c, "w1", "host-a")
        figures = {"source": "remote", "bytes": 1234, "files": 3, "seconds": 0.25}
        beat = c.post("/processors/w1/heartbeat", headers=w1.lease, json={"stats": {
            "stateRestores": {"Partition 0": figures, "invented": figures,
                              "Partition 1": "not figures"}}})
        assert beat.status_code == 200, beat.text
        metrics = c.get("/metrics").text
        labels = 'processor="w1",source="remote",task="Partition 0"'
        assert f"coxswain_state_restore_bytes{{{labels}}} 1234.0" in metrics
        assert f"coxswain_state_restore_seconds{{{labels}}} 0.25" in metrics
        assert "invented" not in metrics
        assert 'task="Partition 1"' not in metrics.split("coxswain_state_restore")[-1]


def test_query_restarts_reported_in_stats_are_a_metric_per_processor(
    start_server: StartServer,
) -> None:
    server = start_server(*ARGS)
    with server.client() as c:
        w1, _ = joined(c, "w1", "host-a")
        beat = c.post("/processors/w1/heartbeat", headers=w1.lease, json={"stats": {
            "queryRestarts": 2, "lastQueryRestart": {"at": 1.0, "cause": "crashed"}}})
        assert beat.status_code == 200, beat.text
        assert 'coxswain_query_restarts{processor="w1"} 2.0' in c.get("/metrics").text
        assert w1.leave().status_code == 204
        assert 'coxswain_query_restarts{processor="w1"}' not in c.get("/metrics").text

