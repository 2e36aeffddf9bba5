"""Kafka client settings: one mechanism for every Kafka client Coxswain makes.

A production broker wants more than ``bootstrap.servers``: ``security.protocol``, SASL
credentials, a CA, perhaps a client certificate. Users give them once, with librdkafka's
names (what confluent-kafka and ``kcat`` take), in a properties file (``--kafka-config``)
and/or as ``--kafka-option KEY=VALUE``; :class:`KafkaClientSettings` carries them to
every client: the confluent-kafka producers, consumers and admin clients
(:meth:`~KafkaClientSettings.client`) and Spark's JVM Kafka connector, whose ``kafka.``
options take the Java client's names (:meth:`~KafkaClientSettings.spark_options`
translates).

Secrets never belong on a command line (``/proc/PID/cmdline`` is readable by every user
of the host): a value may be ``${env:NAME}`` (the environment variable) or
``${file:PATH}`` (the file's content, without its trailing newline), resolved when the
settings are loaded; a secret key given literally in ``--kafka-option`` is refused. The
settings' ``repr`` and :meth:`~KafkaClientSettings.redacted` mask every secret, so a log
line, ``/status`` or an error message cannot carry one.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: librdkafka settings whose values are secrets (masked everywhere, refused literally on
#: the command line)
SECRET_KEYS = frozenset({
    "sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
    "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config", "ssl_key",
})
MASK = "********"

#: names the Java client shares with librdkafka (given to Spark's connector as they are)
_SHARED = frozenset({
    "security.protocol", "sasl.mechanism", "client.id", "request.timeout.ms",
    "sasl.kerberos.service.name", "socket.connection.setup.timeout.ms",
    "metadata.max.age.ms", "reconnect.backoff.ms", "reconnect.backoff.max.ms",
    "retry.backoff.ms", "client.dns.lookup", "ssl.cipher.suites",
})
#: settings Coxswain sets itself on its clients (what they are for), never the user's
_OURS = frozenset({"bootstrap.servers", "group.id", "transactional.id",
                   "enable.auto.commit", "isolation.level"})
_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_REFERENCE = re.compile(r"^\$\{(env|file):(.+)\}$")


class KafkaSettingsError(ValueError):
    """Kafka client settings that cannot be used; the message says which and why (and
    never holds a secret's value)."""


@dataclass(frozen=True, slots=True)
class KafkaClientSettings:
    """The brokers and the settings (librdkafka names, secrets resolved) every Kafka
    client gets. Hashable and picklable: Spark ships it to executors with a source."""

    bootstrap: str
    options: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:
        return f"KafkaClientSettings(bootstrap={self.bootstrap!r}, options={self.redacted()})"

    @property
    def secured(self) -> bool:
        """Whether any setting beyond the brokers is given."""
        return bool(self.options)

    def client(self, settings: Mapping[str, Any] | None = None, /, **extra: Any
               ) -> dict[str, Any]:
        """A confluent-kafka client's configuration: the brokers, the user's settings,
        then the client's own (``settings`` and ``extra``, e.g. ``group.id``), which
        win: they say what the client is for."""
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap}
        conf.update(self.options)
        conf.update(settings or {})
        conf.update(extra)
        return conf

    def redacted(self) -> dict[str, str]:
        """The settings with every secret masked: for logs, ``/status`` and errors."""
        return {k: (MASK if _secret(k) else v) for k, v in self.options}

    def spark_options(self) -> dict[str, str]:
        """Spark Kafka connector options (``kafka.``-prefixed Java client names) for the
        same brokers and settings. Settings only librdkafka knows (tuning such as
        ``queued.min.messages``) are left out; credentials are translated (SASL user and
        password into ``sasl.jaas.config``, PEM files into PEM trust and key stores)."""
        given = dict(self.options)
        out: dict[str, str] = {"bootstrap.servers": self.bootstrap}
        mechanism = given.get("sasl.mechanism") or given.get("sasl.mechanisms")
        if mechanism:
            out["sasl.mechanism"] = mechanism
        if "sasl.username" in given or "sasl.password" in given:
            module = _JAAS_MODULES.get((mechanism or "PLAIN").upper())
            if module is None:
                raise KafkaSettingsError(
                    f"sasl.mechanism {mechanism}: Spark's Kafka connector needs its own "
                    "JAAS configuration for it; use --kafka-reader python and an output "
                    "other than Spark's Kafka sink, or SASL PLAIN/SCRAM")
            out["sasl.jaas.config"] = (
                f'{module} required username="{_jaas_quote(given.get("sasl.username", ""))}" '
                f'password="{_jaas_quote(given.get("sasl.password", ""))}";')
        if "ssl.ca.location" in given:
            out["ssl.truststore.type"] = "PEM"
            out["ssl.truststore.location"] = given["ssl.ca.location"]
        if "ssl.certificate.location" in given or "ssl.key.location" in given:
            try:
                out["ssl.keystore.certificate.chain"] = Path(
                    given["ssl.certificate.location"]).read_text()
                out["ssl.keystore.key"] = Path(given["ssl.key.location"]).read_text()
            except (KeyError, OSError) as e:
                raise KafkaSettingsError(
                    "ssl.certificate.location and ssl.key.location go together and must "
                    f"be readable: {e}") from None
            out["ssl.keystore.type"] = "PEM"
        if "ssl.keystore.location" in given:
            out["ssl.keystore.type"] = "PKCS12"
            out["ssl.keystore.location"] = given["ssl.keystore.location"]
        for key in ("ssl.key.password", "ssl.keystore.password"):
            if key in given:
                out[key] = given[key]
        algorithm = given.get("ssl.endpoint.identification.algorithm")
        if algorithm is not None:
            out["ssl.endpoint.identification.algorithm"] = (
                "" if algorithm.lower() == "none" else algorithm)
        out.update({k: v for k, v in given.items() if k in _SHARED and k not in out})
        return {f"kafka.{k}": v for k, v in out.items()}

    def to_json(self) -> str:
        """The settings as one string (a Spark data source option; Spark masks an
        option whose value mentions a password or secret in plans and logs)."""
        return json.dumps({"bootstrap": self.bootstrap, "options": dict(self.options)})

    @staticmethod
    def from_json(text: str) -> KafkaClientSettings:
        obj = json.loads(text)
        return KafkaClientSettings(str(obj["bootstrap"]),
                                   tuple(sorted(obj.get("options", {}).items())))


def _secret(key: str) -> bool:
    return key in SECRET_KEYS or "password" in key or "secret" in key


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def parse_properties(text: str, source: str) -> dict[str, str]:
    """``key=value`` (or ``key: value``) lines of a Java properties file, with ``#`` and
    ``!`` comments; the common subset, no line continuations."""
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"^([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if match is None:
            raise KafkaSettingsError(f"{source} line {number}: not KEY=VALUE")
        out[match.group(1)] = match.group(2).strip()
    return out


def resolve(key: str, value: str, env: Mapping[str, str]) -> str:
    """``value`` with a ``${env:NAME}`` or ``${file:PATH}`` reference replaced by what it
    names."""
    match = _REFERENCE.match(value.strip())
    if match is None:
        return value
    kind, name = match.groups()
    if kind == "env":
        if name not in env:
            raise KafkaSettingsError(f"{key}: environment variable {name} is not set")
        return env[name]
    try:
        return Path(name).read_text().rstrip("\r\n")
    except OSError as e:
        raise KafkaSettingsError(f"{key}: cannot read {name}: {e.strerror}") from None


def load(bootstrap: str | None, config_files: Iterable[str | Path] = (),
         options: Iterable[str] = (), env: Mapping[str, str] | None = None,
         warn: Any = None, default_bootstrap: str | None = None) -> KafkaClientSettings:
    """The settings from properties files (in order), then ``KEY=VALUE`` options (which
    win). ``bootstrap`` (``--kafka-bootstrap``) wins over a file's ``bootstrap.servers``,
    which wins over ``default_bootstrap``.
    A literal secret among ``options`` is refused; a properties file holding a literal
    secret that other users may read is warned about through ``warn(message)``."""
    env = os.environ if env is None else env
    merged: dict[str, str] = {}
    for path in config_files:
        p = Path(path)
        try:
            text = p.read_text()
        except OSError as e:
            raise KafkaSettingsError(f"--kafka-config {p}: {e.strerror}") from None
        found = parse_properties(text, f"--kafka-config {p}")
        literal = [k for k, v in found.items() if _secret(k) and not _REFERENCE.match(v)]
        if literal and warn is not None and p.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH):
            warn(f"--kafka-config {p} holds {', '.join(sorted(literal))} and is readable by "
                 f"other users: chmod 600 {p}")
        merged.update(found)
    for option in options:
        key, sep, value = option.partition("=")
        key = key.strip()
        if not sep or not key:
            raise KafkaSettingsError(f"--kafka-option {option.split('=')[0]!r}: not KEY=VALUE")
        if _secret(key) and not _REFERENCE.match(value.strip()):
            raise KafkaSettingsError(
                f"--kafka-option {key}: a secret on the command line is visible to every "
                f"user of this host (/proc/PID/cmdline); give {key}=${{env:NAME}}, "
                f"{key}=${{file:PATH}} or put it in a --kafka-config file")
        merged[key] = value
    resolved = {k: resolve(k, v, env) for k, v in merged.items()}
    brokers = bootstrap or resolved.get("bootstrap.servers") or default_bootstrap
    if not brokers:
        raise KafkaSettingsError("no Kafka brokers: give --kafka-bootstrap or "
                                 "bootstrap.servers in --kafka-config")
    ours = sorted(k for k in resolved if k in _OURS and k != "bootstrap.servers")
    if ours:
        raise KafkaSettingsError(
            f"{', '.join(ours)}: set by Coxswain for each client it makes (what the "
            "client is for), not a user setting")
    resolved.pop("bootstrap.servers", None)
    return KafkaClientSettings(brokers, tuple(sorted(resolved.items())))


def check(settings: KafkaClientSettings) -> None:
    """Refuse settings librdkafka does not know (a Java-only name such as
    ``ssl.truststore.location``, a typo) before any client is needed, naming them."""
    from confluent_kafka import KafkaException, Producer  # noqa: PLC0415 (optional dep)

    try:
        Producer(settings.client({"log_level": 0}))
    except KafkaException as e:
        reason = _scrub(e.args[0].str(), settings)
        raise KafkaSettingsError(
            f"Kafka client settings refused by librdkafka: {reason} (the names "
            "are librdkafka's, as confluent-kafka takes them; see docs/security.md)"
        ) from None


def probe(settings: KafkaClientSettings, timeout_s: float = 20.0) -> str | None:
    """Ask the brokers for their metadata with ``settings``. Raises
    :class:`KafkaSettingsError` as soon as they refuse the client (wrong credentials, a
    certificate that does not verify): a worker must not start and retry forever on
    those. Returns None once they answered, or why none did within ``timeout_s`` (down
    or unreachable: a caller may go on, the brokers may come up later)."""
    from confluent_kafka import KafkaError, KafkaException  # noqa: PLC0415 (optional dep)
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    refused: list[Any] = []
    auth = {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED,
            KafkaError._SSL, KafkaError.TOPIC_AUTHORIZATION_FAILED,
            KafkaError.CLUSTER_AUTHORIZATION_FAILED}
    admin = AdminClient(settings.client(
        {"log_level": 0, "error_cb": lambda e: refused.append(e) if e.code() in auth else None}))
    deadline = time.monotonic() + timeout_s
    reason = "no answer"
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1.0)
            return None
        except KafkaException as e:
            reason = e.args[0].str()
        admin.poll(0)  # serves error_cb
        if refused:
            err = refused[0]
            what = ("failed the TLS handshake" if err.code() == KafkaError._SSL
                    else "refused the client's credentials")
            raise KafkaSettingsError(
                f"the Kafka brokers at {settings.bootstrap} {what}: "
                f"{_scrub(err.str(), settings)} (check --kafka-config and --kafka-option: "
                "security.protocol, sasl.*, ssl.*)")
    return reason


def verify(settings: KafkaClientSettings) -> str | None:
    """Secured settings checked before anything starts: :func:`check`, then
    :func:`probe` (raises :class:`KafkaSettingsError` on a wrong name or refused
    credentials; returns why the brokers did not answer, if they did not). Settings of
    the brokers' address alone are not checked: nothing in them can be wrong early."""
    if not settings.secured:
        return None
    check(settings)
    return probe(settings)


def _scrub(text: str, settings: KafkaClientSettings) -> str:
    for key, value in settings.options:
        if _secret(key) and value:
            text = text.replace(value, MASK)
    return text


def plain(bootstrap: str) -> KafkaClientSettings:
    """Settings of brokers that need nothing beyond their address (a local broker)."""
    return KafkaClientSettings(bootstrap)


#: where a client is made: the brokers' address alone (a local broker, a test) or the
#: whole settings
Brokers = str | KafkaClientSettings


def settings_of(brokers: Brokers) -> KafkaClientSettings:
    """``brokers`` as settings (an address alone: no settings beyond it)."""
    return brokers if isinstance(brokers, KafkaClientSettings) else plain(brokers)
