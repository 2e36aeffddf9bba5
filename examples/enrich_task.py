"""``process_task``: per virtual task, rows in offset order, each record enriched (as if by
an external call) and written to an output topic. Tasks run in parallel, so a job scales
past its partition count while each key keeps its order.

    coxswain worker --api task --app examples.enrich_task:process_task \\
        --output-topic orders-enriched --kafka-bootstrap 127.0.0.1:9092
    # or from a Kinesis stream (coxswain dev up --kinesis)
    coxswain worker --api task --app examples.enrich_task:process_task \\
        --output-topic orders-enriched --kafka-bootstrap 127.0.0.1:9092 \\
        --kinesis-endpoint http://127.0.0.1:4567
"""

from __future__ import annotations

import json

import pandas as pd

from worker.runtime import TaskContext


def process_task(ctx: TaskContext, rows: pd.DataFrame) -> pd.DataFrame:
    """One output record per input record, keyed like its input (Kafka or Kinesis input:
    Kinesis rows carry a ``sequenceNumber``, a decimal string, instead of an ``offset``)."""
    kafka = "offset" in rows.columns
    positions = rows["offset"] if kafka else rows["sequenceNumber"]
    values = [json.dumps({"order": (v or b"").decode(errors="replace"),
                          "task": ctx.task_name,
                          "offset" if kafka else "sequenceNumber": int(o) if kafka else o})
              for v, o in zip(rows["value"], positions, strict=True)]
    return pd.DataFrame({"key": list(rows["key"]), "value": values})
