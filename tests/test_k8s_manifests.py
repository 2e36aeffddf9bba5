"""deploy/k8s/ validated offline: every object deserializes into the official Kubernetes
Python client's models (required fields present, types right), the coordinator's
COXSWAIN_* settings (with the example Secret) validate as Coxswain's Settings, and the
workers' and autosizer's arguments parse with Coxswain's own CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient

from service.cli import parser
from service.settings import Settings

K8S = Path(__file__).resolve().parents[1] / "deploy" / "k8s"


def objects() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def by_kind(kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objects() if o["kind"] == kind and o["metadata"]["name"] == name)


def container(obj: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return found


@pytest.mark.parametrize("obj", objects(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_each_object_is_a_valid_kubernetes_model(obj: dict[str, Any]) -> None:
    group = obj["apiVersion"].split("/")[-2] if "/" in obj["apiVersion"] else ""
    version = obj["apiVersion"].split("/")[-1]
    model = f"{version.capitalize()}{obj['kind']}"
    if group == "policy":
        model = f"V1{obj['kind']}"
    parsed = ApiClient()._ApiClient__deserialize(obj, model)  # the client's own loader
    assert parsed.metadata.name == obj["metadata"]["name"]
    assert ApiClient().sanitize_for_serialization(parsed)["kind"] == obj["kind"]


def test_the_coordinator_settings_validate(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    secret = by_kind("Secret", "coxswain")["stringData"]
    env = {e["name"]: e.get("value", "replica-0") for e in container(
        by_kind("Deployment", "coxswain"))["env"]}
    # the Kafka Secret's client.properties where the pod mounts it (here: a folder)
    kafka_files = by_kind("Secret", "coxswain-kafka")["stringData"]
    assert json.loads(env["COXSWAIN_KAFKA_CONFIG"]) == ["/etc/coxswain/kafka/client.properties"]
    (tmp_path / "client.properties").write_text(kafka_files["client.properties"])
    env["COXSWAIN_KAFKA_CONFIG"] = json.dumps([str(tmp_path / "client.properties")])
    for name, value in {**secret, **env}.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.zk and settings.store and settings.stateful
    assert settings.input == ["kafka.orders"] and settings.replica_id == "replica-0"
    identity = settings.zk_identity()
    assert identity is not None and (identity.user, identity.password) == (
        "coxswain-orders", "CHANGE-ME")
    kafka = settings.kafka_client()
    assert kafka is not None and dict(kafka.options)["security.protocol"] == "SASL_SSL"
    tls = settings.server_tls()
    assert tls is not None and tls.cert == "/etc/coxswain/tls/tls.crt"
    deployment = by_kind("Deployment", "coxswain")
    probes = container(deployment)
    assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert probes["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    mounts = {v["name"]: v["secret"]["secretName"]
              for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert mounts == {"tls": "coxswain-tls", "kafka": "coxswain-kafka"}
    assert deployment["spec"]["replicas"] == 3
    assert by_kind("PodDisruptionBudget", "coxswain")["spec"]["minAvailable"] == 2


def test_worker_and_autosizer_arguments_parse() -> None:
    workers = by_kind("StatefulSet", "coxswain-worker")
    args = [re.sub(r"\$\((\w+)\)", lambda m: m[1].lower(), a)
            for a in container(workers)["args"]]
    parsed = parser().parse_args(args)
    assert parsed.processor_id == "pod_name" and parsed.location == "node_name"
    assert parsed.stateful and parsed.state_dir == "/var/lib/coxswain/state"
    assert parsed.coordinator.startswith("https://")
    assert parsed.kafka_config == ["/etc/coxswain/kafka/client.properties"]
    env = {e["name"]: e.get("valueFrom") or e["value"] for e in container(workers)["env"]}
    assert env["COXSWAIN_CA_FILE"] == "/etc/coxswain/tls/ca.crt"
    assert env["POD_NAME"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["NODE_NAME"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    autosizer = parser().parse_args(container(by_kind("Deployment", "coxswain-autosizer"))["args"])
    assert autosizer.apply and autosizer.cooldown_s == 300
