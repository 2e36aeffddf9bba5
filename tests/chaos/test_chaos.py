"""The chaos run, shortened (``bench/chaos.py`` runs it for 10 minutes): a ZooKeeper
ensemble of 3, PostgreSQL, 3 coordinator replicas, Kafka and Spark workers under every
kind of fault at least once and elasticity changes; then an independent reader finds
nothing lost, per-key order kept, duplicates only from killed workers, versions that
never went backwards and the last barrier done."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos import FAULTS, ChaosConfig, run
from service.local.kafka import LocalKafka
from tests.infra.postgres import PostgresServer

pytestmark = pytest.mark.slow


def test_a_short_chaos_run_loses_nothing_and_keeps_order(
    kafka: LocalKafka, postgres: PostgresServer, tmp_path: Path,
) -> None:
    config = ChaosConfig(seconds=90, workers=2, rate=60, gap_s=(4.0, 8.0),
                         scale_every_s=20, seed=20261123, every_fault_once=True)
    report = run(config, tmp_path, progress=print, kafka=kafka, pg=postgres)
    print("\n".join(report.lines()))
    assert all(report.faults[k] >= 1 for k in FAULTS), report.faults
    assert report.factor_changes >= 2
    assert report.produced > 0
    assert report.ok, "\n".join(report.lines())
