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
from worker.runtime.task_api import place_tasks, run_tasks, task_api
from worker.runtime.worker import Worker

__all__ = ["COLUMNS", "KINESIS_COLUMNS", "BatchContext", "NotAStatefulJob", "ProcessBatch",
           "ProcessTask", "QueryDied", "TaskContext", "Worker", "WorkerConfig", "place_tasks",
           "run_tasks", "spark_session", "stop_spark", "task_api"]
