"""``process_task``: per virtual task, rows in offset order, each record enriched (as if by
an external call) and written to an output topic. Tasks run in parallel, so a job scales
past its partition count while each key keeps its order.

    coxswain worker --api task --app examples.enrich_task:process_task \\
        --output-topic orders-enriched --kafka-bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import json

import pandas as pd

from worker.runtime import TaskContext


def process_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """One output record per input record, keyed like its input."""
    values = [json.dumps({"order": (v or b"").decode(errors="replace"),
                          "task": ctx.task_name, "offset": int(o)})
              for v, o in zip(rows["value"], rows["offset"], strict=True)]
    return pd.DataFrame({"key": list(rows["key"]), "value": values})
