"""The chaos run, shortened (``python -m bench.chaos`` runs it for 10 minutes): a
ZooKeeper ensemble of 3, PostgreSQL, 3 coordinator replicas, Kafka and Spark workers
under every kind of fault at least once and elasticity changes; then an independent
reader finds nothing lost, per-key order kept, duplicates only from the workers a fault
hit, versions that never went backwards and the last barrier done. Stateful: the
counting app with standbys and an S3 blob store, every replica and worker in its own
network namespace, and network faults on real links; every count exact. And the same
with exactly-once output: not one duplicate."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos import FAULTS, STATEFUL_FAULTS, ChaosConfig, run
from service.local.kafka import LocalKafka
from service.local.s3 import LocalS3
from tests.infra.postgres import PostgresServer

# beside: run in a second pytest process beside the rest of the run (tests/infra/beside.py)
pytestmark = [pytest.mark.slow, pytest.mark.beside]


def test_a_short_chaos_run_loses_nothing_and_keeps_order(
    kafka: LocalKafka, postgres: PostgresServer, tmp_path: Path,
) -> None:
    config = ChaosConfig(seconds=60, workers=2, rate=60, gap_s=(4.0, 8.0),
                         scale_every_s=20, seed=20261123, every_fault_once=True)
    report = run(config, tmp_path, progress=print, kafka=kafka, pg=postgres)
    print("\n".join(report.lines()))
    assert all(report.faults[k] >= 1 for k in FAULTS), report.faults
    assert report.factor_changes >= 2
    assert report.produced > 0
    assert report.ok, "\n".join(report.lines())


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_a_short_stateful_chaos_run_with_network_faults_keeps_every_count_exact(
    kafka: LocalKafka, postgres: PostgresServer, s3_server: LocalS3, tmp_path: Path,
    exactly_once: bool,
) -> None:
    """With ``exactly_once``, the workers write with --exactly-once and a read_committed
    reader must find no duplicate at all: kills, the leader's failovers and partitions
    included."""
    config = ChaosConfig(seconds=60, workers=2, rate=60, gap_s=(3.0, 5.0),
                         scale_every_s=25, seed=20261126, every_fault_once=True,
                         stateful=True, exactly_once=exactly_once)
    report = run(config, tmp_path, progress=print, kafka=kafka, pg=postgres, s3=s3_server)
    print("\n".join(report.lines()))
    assert all(report.faults[k] >= 1 for k in STATEFUL_FAULTS), report.faults
    assert report.factor_changes >= 2
    assert report.produced > 0
    assert report.ok, "\n".join(report.lines())
