"""A worker process for the lost-lease tests: ``coxswain worker``'s stateful counting app
whose coordinator client, when the test arms one of its request paths (a file
``arm-{path}`` in ``--arm-dir``: heartbeat, commit, poll or ack), first ends its own
lease through the real API (``DELETE /processors/{id}`` with its lease token, as the
leader expiring it would leave it) and then makes that request, which the real
coordinator answers with 404 ``unknown_processor``. So each path meets a lost lease for
certain, while the rest of the worker is the real one.

    python -m tests.worker.lease_loss_worker --coordinator URL --kafka-bootstrap B \\
        --output-topic T --state-dir D --arm-dir A [--processor-id w1]
"""

from __future__ import annotations

import argparse
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from service.logs import configure
from worker.client import CoordinatorClient, LeaseLost
from worker.runtime import Worker, WorkerConfig, spark_session, stop_spark
from worker.runtime.task_api import task_api
from worker.state.tasks import StateConfig

log = logging.getLogger("coxswain.test.lease")
T = TypeVar("T")


class LeaseKillingClient(CoordinatorClient):
    """The real client; an armed path's next request meets a lease ended just before."""

    def __init__(self, url: str, arm_dir: Path) -> None:
        super().__init__(url)
        self._arm_dir = arm_dir
        self._processor_id = ""

    def _armed(self, path: str) -> bool:
        flag = self._arm_dir / f"arm-{path}"
        try:
            flag.unlink()
        except FileNotFoundError:
            return False
        log.info("armed %s: ending this processor's lease first", path)
        super().leave(self._processor_id)
        return True

    def _call_path(self, path: str, call: Callable[[], T]) -> T:
        armed = self._armed(path)
        try:
            return call()
        except LeaseLost:
            if armed:
                log.info("armed %s: lease lost, as it should be", path)
            raise

    def register(self, processor_id: str | None, location_id: str) -> Any:
        reg = super().register(processor_id, location_id)
        self._processor_id = reg.processor_id
        return reg

    def heartbeat(self, processor_id: str, task_lags: dict[str, int] | None = None,
                  stats: dict[str, Any] | None = None) -> int | None:
        return self._call_path("heartbeat", lambda: CoordinatorClient.heartbeat(
            self, processor_id, task_lags, stats))

    def commit(self, processor_id: str, version: int, checkpoints: dict[str, Any]) -> int:
        return self._call_path("commit", lambda: CoordinatorClient.commit(
            self, processor_id, version, checkpoints))

    def ack(self, processor_id: str, version: int) -> str:
        return self._call_path("ack", lambda: CoordinatorClient.ack(self, processor_id,
                                                                     version))

    def job_model(self, processor_id: str, since: int | None = None, wait_ms: int = 0,
                  barrier: str | None = None) -> dict[str, Any] | None:
        if since is None:  # the first request of a registration: not a poll to arm
            return super().job_model(processor_id, since, wait_ms, barrier)
        return self._call_path("poll", lambda: CoordinatorClient.job_model(
            self, processor_id, since, wait_ms, barrier))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--coordinator", required=True)
    p.add_argument("--kafka-bootstrap", required=True)
    p.add_argument("--output-topic", required=True)
    p.add_argument("--state-dir", required=True)
    p.add_argument("--arm-dir", required=True)
    p.add_argument("--processor-id", default="w1")
    args = p.parse_args()
    configure(json_lines=False, level="INFO")
    from tests.worker.apps import count_task

    state_dir = Path(args.state_dir)
    config = WorkerConfig(
        coordinator=args.coordinator, kafka_bootstrap=args.kafka_bootstrap,
        processor_id=args.processor_id, location=f"host-{args.processor_id}",
        spark_master="local[2]", max_offsets_per_trigger=400, api="task",
        output_topic=args.output_topic,
        state=StateConfig(state_dir, f"file://{state_dir.parent / 'blobs'}"))
    spark = spark_session("local[2]")
    worker = Worker(config, task_api(count_task, args.output_topic, args.kafka_bootstrap),
                    spark, LeaseKillingClient(args.coordinator, Path(args.arm_dir)))
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    try:
        worker.run()
    finally:
        stop_spark(spark)


if __name__ == "__main__":
    main()
