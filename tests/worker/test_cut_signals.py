"""The channels a driver cuts its executors' batches through (``worker.cut_signals``),
with real files and a real HTTP server; missing a signal must read "not cut"."""

from __future__ import annotations

from pathlib import Path

from service.local.ports import free_port
from worker.cut_signals import FolderSignals, HttpSignals, is_cut, unreachable


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
