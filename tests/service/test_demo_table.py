"""The demo's pure parts: the per-key order check and the live table."""

from service.demo import OrderCheck, render


def test_order_check_counts_duplicates_and_violations_per_key() -> None:
    check = OrderCheck()
    for key, seq in [("a", 0), ("b", 0), ("a", 1), ("a", 1), ("b", 2), ("b", 1), ("a", 2)]:
        check.add(key, seq)
    assert check.distinct == 6
    assert check.duplicates == 1
    assert check.violations == 1  # b1 after b2


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
    assert table[5].split() == ["worker-1", "host-1", "8", "812", "0.51", "15", "5"]
    assert table[6].split() == ["worker-2", "host-2", "8", "0", "0.00", "0", "-"]
