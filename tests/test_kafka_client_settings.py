"""Kafka client settings (common.kafka_clients): loading, secrets, the Java translation,
and librdkafka's own check of the names."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from common.kafka_clients import (
    MASK,
    KafkaClientSettings,
    KafkaSettingsError,
    check,
    load,
    parse_properties,
)

SECRET = "s3cr3t-pa55word-XyZ"


def test_a_properties_file_and_options_merge_options_winning(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("# Confluent Cloud style\nbootstrap.servers=broker:9093\n"
                     "security.protocol = SASL_SSL\nsasl.mechanism: PLAIN\n"
                     "! another comment\nclient.id=from-file\n")
    s = load(None, [props], ["client.id=from-option"], env={})
    assert s.bootstrap == "broker:9093"
    assert dict(s.options) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                               "client.id": "from-option"}
    assert load("other:1", [props], env={}).bootstrap == "other:1"  # the flag wins
    assert load(None, env={}, default_bootstrap="d:9").bootstrap == "d:9"
    with pytest.raises(KafkaSettingsError, match="no Kafka brokers"):
        load(None, env={})


def test_secrets_resolve_from_the_environment_and_files(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text(SECRET + "\n")
    s = load("b:1", [], [f"sasl.password=${{file:{tmp_path / 'pw'}}}",
                         "sasl.username=${env:KUSER}"], env={"KUSER": "alice"})
    assert dict(s.options) == {"sasl.password": SECRET, "sasl.username": "alice"}
    with pytest.raises(KafkaSettingsError, match="KMISSING is not set"):
        load("b:1", [], ["sasl.password=${env:KMISSING}"], env={})
    with pytest.raises(KafkaSettingsError, match="cannot read"):
        load("b:1", [], [f"sasl.password=${{file:{tmp_path / 'none'}}}"], env={})


def test_a_literal_secret_on_the_command_line_is_refused_without_echoing_it() -> None:
    for key in ("sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret"):
        with pytest.raises(KafkaSettingsError) as e:
            load("b:1", [], [f"{key}={SECRET}"], env={})
        assert "visible to every user" in str(e.value) and "${env:NAME}" in str(e.value)
        assert SECRET not in str(e.value)


def test_a_readable_file_with_a_literal_secret_is_warned_about(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text(f"sasl.password={SECRET}\n")
    warnings: list[str] = []
    props.chmod(0o644)
    load("b:1", [props], env={}, warn=warnings.append)
    assert len(warnings) == 1 and "chmod 600" in warnings[0] and SECRET not in warnings[0]
    props.chmod(0o600)
    load("b:1", [props], env={}, warn=warnings.append)
    assert len(warnings) == 1


def test_settings_coxswain_sets_itself_are_refused() -> None:
    with pytest.raises(KafkaSettingsError, match=r"group\.id"):
        load("b:1", [], ["group.id=mine"], env={})


def test_secrets_never_show_in_repr_redacted_or_an_error() -> None:
    s = KafkaClientSettings("b:1", (("sasl.password", SECRET), ("sasl.username", "alice")))
    assert SECRET not in repr(s) and SECRET not in str(s)
    assert s.redacted() == {"sasl.password": MASK, "sasl.username": "alice"}
    assert pickle.loads(pickle.dumps(s)) == s  # shipped to executors with the source
    assert KafkaClientSettings.from_json(s.to_json()) == s
    hash(s)  # a key of the executors' consumer pools


def test_client_settings_come_before_the_clients_own() -> None:
    s = KafkaClientSettings("b:1", (("security.protocol", "SSL"), ("linger.ms", "50")))
    conf = s.client({"linger.ms": 5}, **{"transactional.id": "t"})
    assert conf == {"bootstrap.servers": "b:1", "security.protocol": "SSL", "linger.ms": 5,
                    "transactional.id": "t"}


def test_the_java_clients_names_for_sasl_scram_and_pem_files(tmp_path: Path) -> None:
    (tmp_path / "c.pem").write_text("CERT")
    (tmp_path / "k.pem").write_text("KEY")
    s = KafkaClientSettings("b:1", tuple(sorted({
        "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "al\"ice", "sasl.password": SECRET,
        "ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": "none",
        "ssl.certificate.location": str(tmp_path / "c.pem"),
        "ssl.key.location": str(tmp_path / "k.pem"),
        "queued.min.messages": "5"}.items())))
    java = s.spark_options()
    assert java["kafka.bootstrap.servers"] == "b:1"
    assert java["kafka.security.protocol"] == "SASL_SSL"
    assert java["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="al\\"ice" password="{SECRET}";')
    assert java["kafka.ssl.truststore.type"] == "PEM"
    assert java["kafka.ssl.truststore.location"] == "/ca.pem"
    assert java["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert (java["kafka.ssl.keystore.type"], java["kafka.ssl.keystore.certificate.chain"],
            java["kafka.ssl.keystore.key"]) == ("PEM", "CERT", "KEY")
    assert "kafka.queued.min.messages" not in java  # librdkafka's alone
    plain_text = KafkaClientSettings("b:1", (("sasl.mechanism", "PLAIN"),
                                             ("sasl.username", "u"), ("sasl.password", "p")))
    assert plain_text.spark_options()["kafka.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required")
    with pytest.raises(KafkaSettingsError, match="OAUTHBEARER"):
        KafkaClientSettings("b:1", (("sasl.mechanism", "OAUTHBEARER"),
                                    ("sasl.username", "u"))).spark_options()


def test_librdkafka_refuses_an_unknown_or_java_only_name_at_start() -> None:
    check(KafkaClientSettings("127.0.0.1:1", (("security.protocol", "PLAINTEXT"),)))
    with pytest.raises(KafkaSettingsError, match=r"use `ssl\.ca\.location`"):
        check(KafkaClientSettings("127.0.0.1:1", (("ssl.truststore.location", "/x"),)))
    with pytest.raises(KafkaSettingsError, match=r"No such configuration property.*securty"):
        check(KafkaClientSettings("127.0.0.1:1", (("securty.protocol", "SSL"),)))
    with pytest.raises(KafkaSettingsError) as e:
        check(KafkaClientSettings("127.0.0.1:1", (("security.protocol", "SASL_SSL"),
                                                  ("sasl.mechanism", "NOPE"),
                                                  ("sasl.password", SECRET))))
    assert SECRET not in str(e.value)


def test_properties_lines_that_are_not_settings_are_refused() -> None:
    with pytest.raises(KafkaSettingsError, match="line 2"):
        parse_properties("a=1\njust words\n", "f")
