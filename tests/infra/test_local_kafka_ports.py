"""The local broker's ports: a port it picked that another process takes before the broker
binds it is picked again; the caller's own port taken is a clear error; a broker that
exits says why (its first ERROR line, not only the shutdown after it)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from service.local.kafka import LocalKafka, exit_reason
from service.local.ports import free_ports


@contextmanager
def listening(port: int) -> Iterator[None]:
    """Another process's server on ``port`` (127.0.0.1)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        yield


def test_free_ports_are_distinct() -> None:
    for _ in range(50):
        ports = free_ports(4)
        assert len(set(ports)) == 4


def test_a_picked_port_taken_before_the_bind_is_picked_again(tmp_path: Path) -> None:
    kafka = LocalKafka.create(tmp_path / "broker")
    taken = kafka.controller_port
    try:
        with listening(taken):
            kafka.start()
            assert kafka.running
            assert kafka.controller_port != taken
            topics = AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10)
            assert topics.brokers
            log = (tmp_path / "broker" / "server.log").read_text(errors="replace")
            assert f"failed to bind to 127.0.0.1:{taken}" in log  # the first start did fail
    finally:
        kafka.destroy()


def test_the_callers_port_taken_is_a_clear_error(tmp_path: Path) -> None:
    port = free_ports(1)[0]
    kafka = LocalKafka.create(tmp_path / "broker", port=port)
    try:
        with listening(port), pytest.raises(RuntimeError,
                                            match=f"could not bind 127.0.0.1:{port}"):
            kafka.start()
        assert not kafka.running
        assert kafka.port == port
    finally:
        kafka.destroy()


def test_the_exit_reason_leads_with_the_first_error() -> None:
    log = "\n".join([
        "[main] INFO kafka.server.KafkaConfig - KafkaConfig values:",
        "[main] ERROR kafka.server.KafkaRaftServer - Fatal error during startup: no disk",
        *[f"[kafka-shutdown-hook] INFO kafka.server.X - shutting down {i}" for i in range(200)],
    ])
    reason = exit_reason(log)
    assert reason.startswith("[main] ERROR kafka.server.KafkaRaftServer - Fatal error")
    assert reason.endswith("shutting down 199")
    assert "(no ERROR line)" in exit_reason("[main] INFO only\n")
