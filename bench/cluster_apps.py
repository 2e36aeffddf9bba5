"""The jobs of ``bench.cluster``, in a module of their own: the executors import it (on a
cluster it is shipped with the ``bench`` package), so it imports nothing of the tests."""

from __future__ import annotations

import json
import time
from typing import Any

import pandas as pd

WORK_S = 0.001


def _busy(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def echo_task(ctx: Any, rows: pd.DataFrame) -> pd.DataFrame:
    """1 ms of CPU per record, then one output record with when its work ran."""
    out = []
    for k, v in zip(rows["key"], rows["value"], strict=True):
        started = time.time()
        _busy(WORK_S)
        out.append(json.dumps({"key": k.decode(), "seq": int(v), "t0": started,
                               "t": time.time()}))
    return pd.DataFrame({"key": list(rows["key"]), "value": out})


def count_task(ctx: Any, rows: pd.DataFrame) -> pd.DataFrame:
    """``echo_task`` with a per-key counter in task state (``count`` == ``seq`` + 1)."""
    out = []
    for k, v in zip(rows["key"], rows["value"], strict=True):
        started = time.time()
        _busy(WORK_S)
        n = ctx.state.get(k, "count", 0) + 1
        ctx.state.set(k, "count", n)
        out.append(json.dumps({"key": k.decode(), "seq": int(v), "count": n,
                               "t0": started, "t": time.time()}))
    return pd.DataFrame({"key": list(rows["key"]), "value": out})
