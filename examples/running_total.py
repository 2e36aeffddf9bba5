"""``process_task`` with state: a running total per customer, kept in ``ctx.state``.

    coxswain worker --api task --stateful --app examples.running_total:process_task \\
        --output-topic orders-totals --kafka-bootstrap 127.0.0.1:9092 \\
        [--state-dir ./coxswain-state] [--blob-store file:///var/coxswain/blobs]

Each order (the JSON ``coxswain dev produce`` writes, with an optional ``amount``) adds to
its customer's total; one output row per order carries the total so far. The state of a
customer lives under its record key, so it follows its key bucket wherever the task runs:
restored from the snapshot committed with the task's offsets, and counted exactly once.
"""

from __future__ import annotations

import json

import pandas as pd

from worker.runtime import TaskContext


def process_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """One output row per order: (customer, orders so far, total so far)."""
    values = []
    for key, value in zip(rows["key"], rows["value"], strict=True):
        order = json.loads(value or b"{}")
        orders = ctx.state.get(key, "orders", 0) + 1
        total = ctx.state.get(key, "total", 0.0) + float(order.get("amount", 1.0))
        ctx.state.set(key, "orders", orders)
        ctx.state.set(key, "total", total)
        values.append(json.dumps({"customer": (key or b"").decode(), "orders": orders,
                                  "total": round(total, 2)}))
    return pd.DataFrame({"key": list(rows["key"]), "value": values})
