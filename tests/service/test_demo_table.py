"""The demo's parts: the per-key order check, the live table, a start-up wait's report."""

import io
import shutil
import subprocess
from pathlib import Path

from service.demo import Demo, DemoPlan, OrderCheck, render
from service.local.orders import amount_cents
from tests.service.conftest import StartServer


def test_order_check_counts_duplicates_and_violations_per_key() -> None:
    check = OrderCheck()
    for key, seq in [("a", 0), ("b", 0), ("a", 1), ("a", 1), ("b", 2), ("b", 1), ("a", 2)]:
        check.add(key, seq)
    assert check.distinct == 6
    assert check.duplicates == 1
    assert check.violations == 1  # b1 after b2


def test_order_check_checks_running_totals_of_a_stateful_run() -> None:
    check = OrderCheck()
    a0, a1 = amount_cents("a", 0), amount_cents("a", 1)
    check.add("a", 0, 1, a0)
    check.add("a", 1, 2, a0 + a1)
    check.add("a", 1, 2, a0 + a1)  # a duplicate with the right total is fine
    assert check.wrong_totals == 0
    check.add("b", 0, 2, amount_cents("b", 0))  # counted twice
    check.add("a", 2, 3, a0 + a1)  # an order's amount missing
    assert check.wrong_totals == 2


def test_table_shows_state_size_per_task() -> None:
    status = {"processors": [
        {"processorId": "worker-1", "locationId": "host-1", "activeTasks": 2,
         "stats": {"stateBytes": {"Partition 0_1_2": 120_000, "Partition 0_0_2": 80_000}}},
        {"processorId": "worker-2", "locationId": "host-2", "activeTasks": 1,
         "stats": {"stateBytes": {"Partition 1_0_2": 1_000_000}}}]}
    table = render(status, "stage", 1.0, 0, OrderCheck()).splitlines()
    at = table.index("state: 1.2 MB in 3 tasks")
    assert [line.split() for line in table[at + 1:at + 5]] == [
        ["TASK", "PROCESSOR", "STATE", "KB"],
        ["Partition", "0_0_2", "worker-1", "80"],
        ["Partition", "0_1_2", "worker-1", "120"],
        ["Partition", "1_0_2", "worker-2", "1,000"]]


def test_table_shows_processors_tasks_lag_and_throughput() -> None:
    status = {"latestVersion": 5, "activeVersion": 5, "barrier": "done",
              "elasticityFactor": 4, "lastRebalance": {"reason": "scale"},
              "processors": [
                  {"processorId": "worker-1", "locationId": "host-1", "activeTasks": 8,
                   "stats": {"recordsPerSecond": 812.4, "batchSeconds": 0.512,
                             "consumerLag": {"Partition 0_0_4": 10, "Partition 0_1_4": 5},
                             "version": 5}},
                  {"processorId": "worker-2", "locationId": "host-2", "activeTasks": 8,
                   "stats": {}}]}
    check = OrderCheck()
    check.add("a", 0)
    table = render(status, "elasticity factor 4", 42.0, 1234, check).splitlines()
    assert "job model v5 (barrier done, active v5)  elasticity factor 4" in table[1]
    assert "produced 1,234  processed 1" in table[2]
    assert table[4].split() == ["PROCESSOR", "LOCATION", "TASKS", "RECORDS/S", "BATCH", "S",
                                "LAG", "ON", "VERSION"]
    # the key buckets of partition 0 each report the partition's records behind: counted
    # once (summed, a factor of 4 showed the backlog four times over)
    assert table[5].split() == ["worker-1", "host-1", "8", "812", "0.51", "10", "5"]
    assert table[6].split() == ["worker-2", "host-2", "8", "0", "0.00", "0", "-"]


def test_a_start_up_wait_that_times_out_says_which_what_it_saw_and_where_the_logs_are(
    start_server: StartServer, tmp_path: Path,
) -> None:
    server = start_server("--input", "kafka.orders:2")
    out = io.StringIO()
    demo = Demo(DemoPlan(workers=2), out=out, work_dir=tmp_path)
    (tmp_path / "worker-1.log").write_text("starting Spark\njava.net.BindException: boom\n")
    sleeper = subprocess.Popen(["sleep", "60"])
    demo._procs["worker-1"] = sleeper  # a started process that is still running
    try:
        with server.client() as api:
            assert not demo._wait_until("workers starting", api, 0.2, lambda s: False,
                                        expected="2 processors registered")
    finally:
        sleeper.kill()
        sleeper.wait()
    said = out.getvalue()
    assert "gave up waiting for 'workers starting' after 0s" in said
    assert "expected 2 processors registered; saw processors none" in said
    assert f"last lines of {tmp_path / 'worker-1.log'}" in said
    assert "java.net.BindException: boom" in said


def test_without_a_terminal_the_table_is_logged_per_stage_and_every_30_s() -> None:
    out = io.StringIO()  # (not a terminal)
    demo = Demo(DemoPlan(workers=2), out=out)
    try:
        demo._show("table A", "elasticity factor 1")
        demo._show("table B", "elasticity factor 1")  # same stage, seconds later
        demo._show("table C", "elasticity factor 4")
        assert out.getvalue() == "table A\n\ntable C\n\n"
        demo._shown = ("elasticity factor 4", 0.0)  # 30 s and more ago
        demo._show("table D", "elasticity factor 4")
        assert out.getvalue().endswith("table D\n\n")
    finally:
        shutil.rmtree(demo.work_dir, ignore_errors=True)


def test_the_capacity_per_factor_is_the_median_of_the_workers_summed_rates() -> None:
    demo = Demo(DemoPlan(workers=2), out=io.StringIO())
    try:
        busy = {"processors": [{"stats": {"recordsPerSecond": 300.0}},
                               {"stats": {"recordsPerSecond": 200.0}}]}
        starting = {"processors": [{"stats": {"recordsPerSecond": 300.0}}, {"stats": {}}]}
        for status in (busy, busy, starting):
            demo._capacity("elasticity factor 1", status)
        demo._capacity("elasticity factor 4: handing over", busy)  # not a stage's rate
        demo._capacity("elasticity factor 4", {"processors": [
            {"stats": {"recordsPerSecond": 900.0}}, {"stats": {"recordsPerSecond": 1000.0}}]})
        assert demo.capacity_lines() == ["  factor 1: 500 records/s",
                                         "  factor 4: 1,900 records/s"]
    finally:
        shutil.rmtree(demo.work_dir, ignore_errors=True)

