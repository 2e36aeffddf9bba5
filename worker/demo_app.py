"""The app ``coxswain demo`` runs on its workers: ``process_task`` over orders keyed by
customer, each order taking a little work (as if an external call), each output record
saying which task, processor and job model version handled it, so the demo can check
per-key order across scale changes. ``coxswain demo --stateful`` runs
``total_per_customer``: a running total and order count per customer in ``ctx.state``,
checked by the demo against the amounts it knows."""

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


def total_per_customer(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """Per customer, a running total of order amounts and an order count in the task's
    state; each output record carries both."""
    out = []
    for key, value in zip(rows["key"], rows["value"], strict=True):
        time.sleep(WORK_S)
        order = json.loads(value)
        total = ctx.state.get(key, "totalCents", 0) + int(order["amountCents"])
        count = ctx.state.get(key, "orders", 0) + 1
        ctx.state.set(key, "totalCents", total)
        ctx.state.set(key, "orders", count)
        out.append(json.dumps({"key": bytes(key).decode(), "seq": order["seq"],
                               "task": ctx.task_name, "processor": ctx.processor_id,
                               "version": ctx.version, "orders": count,
                               "totalCents": total}))
    return pd.DataFrame({"key": list(rows["key"]), "value": out})
