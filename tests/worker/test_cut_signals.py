"""The channels a driver cuts its executors' batches through (``worker.cut_signals``),
with real files and a real HTTP server; missing a signal must read "not cut"."""

from __future__ import annotations

from pathlib import Path

from service.local.ports import free_port
from worker.cut_signals import (
    FolderSignals,
    HttpSignals,
    forget_reports,
    is_cut,
    unreachable,
    write_report,
)


def test_folder_signals_are_files_named_for_the_batch(tmp_path: Path) -> None:
    signals = FolderSignals(tmp_path / "cuts")
    assert not is_cut(signals.where, 3)
    signals.cut(3)
    assert is_cut(signals.where, 3) and not is_cut(signals.where, 4)
    signals.clear(3)
    assert not is_cut(signals.where, 3)
    signals.cut(5)
    signals.close()  # nothing signalled any more
    assert not is_cut(signals.where, 5)
    assert unreachable(signals.where) == ""
    assert "no folder" in unreachable(str(tmp_path / "elsewhere"))


def test_http_signals_answer_per_batch_and_a_driver_out_of_reach_reads_not_cut() -> None:
    signals = HttpSignals("127.0.0.1")
    try:
        assert signals.where.startswith("http://127.0.0.1:")
        assert unreachable(signals.where) == ""
        assert not is_cut(signals.where, 7)
        signals.cut(7)
        assert is_cut(signals.where, 7) and not is_cut(signals.where, 8)
        signals.clear(7)
        assert not is_cut(signals.where, 7)
        signals.cut(9)
    finally:
        signals.close()
        signals.close()  # twice: the worker and its launcher may both close it
    assert not is_cut(signals.where, 9)  # the server is gone: not cut, no error
    assert unreachable(signals.where) != ""
    nobody = f"http://127.0.0.1:{free_port()}"
    assert not is_cut(nobody, 1)
    assert "URLError" in unreachable(nobody) or "Error" in unreachable(nobody)


def test_folder_reports_are_read_per_batch_lowest_first_and_cleared(tmp_path: Path) -> None:
    """A report written beside the signal is the driver's second channel: an update
    Spark drops from the accumulator must not let a task be committed past what it left."""
    signals = FolderSignals(tmp_path / "cuts")
    where = signals.where
    write_report(where, 7, "Partition 3_1_2", {("orders", 3): 1049})
    write_report(where, 7, "Partition 2_1_2", {("orders", 2): 1212, ("orders", 5): 9})
    write_report(where, 8, "Partition 3_1_2", {("orders", 3): 1100})
    write_report(where, 7, "Partition 3_1_2", {("orders", 3): 1049})  # (again: same file)
    assert signals.reports(7) == {("Partition 3_1_2", "orders", 3): 1049,
                                  ("Partition 2_1_2", "orders", 2): 1212,
                                  ("Partition 2_1_2", "orders", 5): 9}
    signals.clear(7)
    assert signals.reports(7) == {}
    assert signals.reports(8) == {("Partition 3_1_2", "orders", 3): 1100}
    signals.close()
    assert list((tmp_path / "cuts").iterdir()) == []


def test_http_signals_carry_no_reports() -> None:
    signals = HttpSignals("127.0.0.1")
    try:
        write_report(signals.where, 7, "Partition 0", {("orders", 0): 5})  # nowhere
        assert signals.reports(7) is None
    finally:
        signals.close()


def test_a_retried_attempt_forgets_what_the_failed_one_reported(tmp_path: Path) -> None:
    """The accumulator keeps a successful attempt's reports only: the files must too, or
    a task the retry ran whole would be committed to where the failed attempt stopped."""
    signals = FolderSignals(tmp_path / "cuts")
    write_report(signals.where, 7, "Partition 0", {("orders", 0): 40})  # attempt 1
    write_report(signals.where, 7, "Partition 1", {("orders", 1): 9})  # another Spark task
    forget_reports(signals.where, 7, ["Partition 0"])  # attempt 2 starts, runs it whole
    assert signals.reports(7) == {("Partition 1", "orders", 1): 9}
    forget_reports("http://127.0.0.1:1", 7, ["Partition 1"])  # no files there: nothing
    assert signals.reports(7) == {("Partition 1", "orders", 1): 9}
