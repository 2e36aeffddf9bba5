"""The app ``coxswain demo`` runs on its workers: ``process_task`` over orders keyed by
customer, each order taking a little work (as if an external call), each output record
saying which task, processor and job model version handled it, so the demo can check
per-key order across scale changes."""

from __future__ import annotations

import json
import time

import pandas as pd

from worker.runtime import TaskContext

WORK_S = 0.001


def process_order(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """One output record per order: key, sequence number, task, processor, version."""
    out = []
    for key, value in zip(rows["key"], rows["value"], strict=True):
        time.sleep(WORK_S)
        order = json.loads(value)
        out.append(json.dumps({"key": bytes(key).decode(), "seq": order["seq"],
                               "task": ctx.task_name, "processor": ctx.processor_id,
                               "version": ctx.version}))
    return pd.DataFrame({"key": list(rows["key"]), "value": out})
