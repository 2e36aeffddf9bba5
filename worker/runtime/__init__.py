"""The PySpark worker runtime: one Structured Streaming query per worker for its life,
fed by a Coxswain source that plans each micro-batch from the worker's current job model
(a handover is a batch boundary, not a new query).

* ``contexts``: how a worker runs, and what user code gets beside its rows;
* ``task_api``: ``process_task`` per virtual task, its output to Kafka;
* ``batches``: running the micro-batches for the tasks running now, and their commits;
* ``query``: the one query and the source plan it reads;
* ``handover``: following the job models at batch boundaries;
* ``control``: the long poll, heartbeats and standby copies, each on its own thread;
* ``worker``: a worker's life, registration to leave;
* ``spark``: the Spark session;
* ``app``: the user's app, shipped to the executors and checked there.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.runtime.contexts import (
        COLUMNS,
        KINESIS_COLUMNS,
        BatchContext,
        ProcessBatch,
        ProcessTask,
        TaskContext,
        WorkerConfig,
    )
    from worker.runtime.handover import NotAStatefulJob, QueryDied
    from worker.runtime.spark import spark_session, stop_spark
    from worker.runtime.task_api import place_tasks, run_tasks
    from worker.runtime.worker import Worker

#: where each name lives. Imported on first use (PEP 562): every Python worker that runs
#: a task imports this package (its app's ``from worker.runtime import TaskContext``, the
#: task runner's module), and the driver's side of the runtime (the query, handovers,
#: the coordinator client, exactly-once output) cost each of them 0.3 s of CPU to import
_HOMES = {
    "COLUMNS": "contexts", "KINESIS_COLUMNS": "contexts", "BatchContext": "contexts",
    "ProcessBatch": "contexts", "ProcessTask": "contexts", "TaskContext": "contexts",
    "WorkerConfig": "contexts", "NotAStatefulJob": "handover", "QueryDied": "handover",
    "spark_session": "spark", "stop_spark": "spark", "place_tasks": "task_api",
    "run_tasks": "task_api", "Worker": "worker",
}
# (``task_api``, the function, is imported from ``worker.runtime.task_api``: loaded on
# first use, the package's name ``task_api`` is that submodule, as Python binds it)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = ["COLUMNS", "KINESIS_COLUMNS", "BatchContext", "NotAStatefulJob", "ProcessBatch",
           "ProcessTask", "QueryDied", "TaskContext", "Worker", "WorkerConfig", "place_tasks",
           "run_tasks", "spark_session", "stop_spark"]
