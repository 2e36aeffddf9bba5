"""The README's first job: each order's amount in euros, keyed by its customer."""

import json

import pandas as pd

from worker.runtime import TaskContext


def process_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """Called for each task with its rows in offset order; returns the rows to write."""
    orders = [json.loads(v) for v in rows["value"]]
    euros = [f'{o["id"]} {o["amountCents"] / 100:.2f} EUR' for o in orders]
    return pd.DataFrame({"key": rows["key"], "value": euros})
