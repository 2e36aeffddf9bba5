"""Exactly-once output's control side (#28, docs/architecture.md "Exactly-once output"):
the checkpoint log topic, and the fencing a worker does before it acks a version.

A version lists in ``config.fencedProcessors`` the processors it removed that may still
write (``coordinator.fenced``). Before acking it, a worker fences each one's
transactional id and posts what each committed to the log but never posted
(``POST /checkpoints/recovered``): the barrier completes only after every participant
did, so the next owners of those processors' tasks start from every checkpoint that was
committed with output, and no write of a removed processor can commit any more.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.cimpl import NewTopic

from common.kafka_clients import Brokers, settings_of
from worker.client import CoordinatorClient, CoordinatorError
from worker.output.transactions import CheckpointRecord, fence, read_log, transactional_id

log = logging.getLogger("coxswain.worker")

FENCED = "fencedProcessors"  # the job model config key (coordinator.fenced.FENCED)

#: the log keeps the latest record per transactional id; older ones may go
LOG_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": str(10 * 60 * 1000),
                    "min.cleanable.dirty.ratio": "0.1"}


@dataclass(frozen=True, slots=True)
class ExactlyOnce:
    """Where a worker's transactions go: the broker, the output topic, the checkpoint
    log, and the job's name in transactional ids."""

    bootstrap: Brokers  # the brokers' address, or every client setting
    output_topic: str
    log_topic: str

    @staticmethod
    def for_output(bootstrap: Brokers, output_topic: str, log_topic: str | None = None
                   ) -> ExactlyOnce:
        """The default log is named for the output topic: one log per output."""
        return ExactlyOnce(bootstrap, output_topic,
                           log_topic or f"{output_topic}.coxswain-checkpoints")

    def transactional_id(self, processor_id: str) -> str:
        """A processor's transactional id (the same for every incarnation: a new one
        fences the old one as it starts)."""
        return transactional_id(self.log_topic, processor_id)


def ensure_log_topic(eo: ExactlyOnce, timeout_s: float = 30.0) -> None:
    """Create the checkpoint log (one partition, compacted) unless it exists; refuse one
    with more partitions (a reader after a fence reads one partition to its end)."""
    admin = AdminClient(settings_of(eo.bootstrap).client())
    topics = admin.list_topics(timeout=timeout_s).topics
    found = topics.get(eo.log_topic)
    if found is None or found.error is not None:
        futures = admin.create_topics(
            [NewTopic(eo.log_topic, num_partitions=1, replication_factor=-1,
                      config=dict(LOG_TOPIC_CONFIG))], operation_timeout=timeout_s)
        for future in futures.values():
            try:
                future.result(timeout_s)
            except Exception as e:  # created meanwhile by another worker: fine
                if "TOPIC_ALREADY_EXISTS" not in str(e) and "already exists" not in str(e):
                    raise
        log.info("created the checkpoint log %s (1 partition, compacted)", eo.log_topic)
        return
    if len(found.partitions) != 1:
        raise ValueError(f"the checkpoint log {eo.log_topic} has {len(found.partitions)} "
                         "partitions; it must have exactly one")
    resource = ConfigResource(ConfigResource.Type.TOPIC, eo.log_topic)
    described = admin.describe_configs([resource])[resource].result(timeout_s)
    policy = described["cleanup.policy"].value
    if "compact" not in (policy or ""):
        log.warning("the checkpoint log %s has cleanup.policy=%s: records a fenced "
                    "processor never posted may be deleted before they are recovered; "
                    "use compact", eo.log_topic, policy)


def latest_records(records: Iterable[CheckpointRecord]) -> dict[str, CheckpointRecord]:
    """The last record of each transactional id (the log is in commit order; each
    record covers all of its processor's earlier ones)."""
    latest: dict[str, CheckpointRecord] = {}
    for record in records:
        latest[record.transactional_id] = record
    return latest


class Fencing:
    """Fences the processors each version lists, once per listing, and recovers what
    they committed but never posted."""

    def __init__(self, eo: ExactlyOnce, client: CoordinatorClient) -> None:
        self._eo = eo
        self._client = client
        self._listed: frozenset[str] = frozenset()  # as of the last version handled

    def before_ack(self, model: Mapping[str, Any]) -> None:
        """Fence and recover the processors ``model`` lists that the last version handled
        did not (a processor listed again after it left the list is fenced again)."""
        listed = frozenset(model.get("config", {}).get(FENCED) or ())
        todo = sorted(listed - self._listed)
        if todo:
            self.fence_and_recover(todo)
        self._listed = listed

    def fence_and_recover(self, processor_ids: Iterable[str]) -> int:
        """Fence ``processor_ids``' transactions, then post each one's last committed
        checkpoint record; how many were posted."""
        ids = sorted(self._eo.transactional_id(p) for p in processor_ids)
        fence(self._eo.bootstrap, ids)
        return self.recover(processor_ids)

    def recover(self, processor_ids: Iterable[str]) -> int:
        """Post the last committed checkpoint record of each of ``processor_ids``, whose
        transactions are fenced already (by :meth:`fence_and_recover`, or by this
        worker's own producer taking its id over); how many were posted."""
        ids = {self._eo.transactional_id(p): p for p in processor_ids}
        posted = 0
        records = read_log(self._eo.bootstrap, self._eo.log_topic, set(ids))
        for tid, record in sorted(latest_records(records).items()):
            try:
                advanced = self._client.recover(ids[tid], record.version, record.checkpoints)
            except CoordinatorError as e:
                if e.code != "fenced":
                    raise
                # the version that removed it is done: every participant posted it
                log.info("checkpoint of fenced %s (version %d) already recovered: %s",
                         ids[tid], record.version, e)
                continue
            posted += 1
            log.info("fenced %s; recovered its last checkpoint (version %d, log offset %d): "
                     "%d offsets moved", ids[tid], record.version, record.offset, advanced)
        return posted
