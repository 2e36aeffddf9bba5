"""What a failed chaos run prints about a lost record (``bench.chaos.trace``): the faults,
then every log's lines about the record's task between its neighbours, in time order."""

from __future__ import annotations

import time
from pathlib import Path

from bench.chaos.config import ChaosReport, FaultCost
from bench.chaos.trace import alarms, trace_lost


def logged(at: float, text: str) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) \
        + f",{int(at * 1000) % 1000:03d} {text}"


def test_the_lost_records_task_is_traced_through_every_log_in_time_order(
        tmp_path: Path) -> None:
    t0 = float(int(time.time()))
    (tmp_path / "w0.log").write_text("\n".join([
        logged(t0 + 1, "DEBUG coxswain.worker.batches batch 7 v10 read 3[900,950)g4 | "
                       "ran Partition 3_1_2:3>=900 | left - | commit Partition 3_1_2=950"),
        logged(t0 + 2, "DEBUG coxswain.worker.batches batch 8 v10 read 3[950,960)g4 | "
                       "ran Partition 3_0_2:3>=950 | left - | commit Partition 3_0_2=960"),
        logged(t0 + 30, "INFO coxswain.worker version 12: handing over Partition 3_1_2"),
    ]) + "\n")
    (tmp_path / "r0").mkdir()
    (tmp_path / "r0" / "server-1.log").write_text(
        logged(t0 + 3, "INFO coxswain.coordinator processor w0 lease expired") + "\n")
    (tmp_path / "w1.log").write_text("[Stage 0:>  (0 + 1) / 1]" + logged(
        t0 + 4, "INFO coxswain.worker version 12: running Partition 3_1_2 from 3:1049"))
    before = {"task": "Partition 3_1_2", "at": t0 + 1.0}
    after = {"task": "Partition 3_1_2", "at": t0 + 4.0}
    lines = trace_lost(tmp_path, [(before, after)],
                       [FaultCost("partition_worker", t0 + 2.5, 8.0, {123})], t0)
    assert lines[0].startswith("trace of Partition 3_1_2 from t+-1.0s to t+4.5s")
    assert lines[1] == "  t+   2.5s partition_worker for 8.0s (pids [123])"
    body = lines[2:]
    assert [b.split(":")[0].strip() for b in body] == ["w0", "r0", "w1"]
    assert "batch 7" in body[0] and "lease expired" in body[1] and "from 3:1049" in body[2]
    assert not any("batch 8" in b or "t0 + 30" in b for b in body)  # another task; later


def test_nothing_is_traced_without_a_lost_record(tmp_path: Path) -> None:
    assert trace_lost(tmp_path, [], [], 0.0) == []


def test_a_reading_that_slipped_fails_the_run_and_a_dropped_report_is_told(
        tmp_path: Path) -> None:
    t0 = float(int(time.time()))
    (tmp_path / "w0.log").write_text("\n".join([
        logged(t0, "ERROR coxswain.worker batch 9: read ['in/3@1056'] from past where "
                   "['Partition 3_1_2'] start (Partition 3_1_2 3:1049): not run in it"),
        logged(t0, "ERROR coxswain.worker batch 12: the cut reports of the accumulator "
                   "({}) and of the signals' folder (...) differ"),
        logged(t0, "INFO coxswain.worker batch 13: cut short, 2 tasks left records"),
    ]) + "\n")
    slipped, dropped = alarms(tmp_path)
    assert len(slipped) == 1 and "batch 9" in slipped[0]
    assert len(dropped) == 1 and "batch 12" in dropped[0]
    report = ChaosReport(final_barrier="done", slipped=slipped, dropped_reports=dropped)
    assert not report.ok
    assert "readings that slipped past a task's start: 1; cut reports Spark dropped: 1" \
        in report.lines()
    assert ChaosReport(final_barrier="done", dropped_reports=dropped).ok
