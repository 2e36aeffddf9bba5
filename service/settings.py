"""Settings of ``coxswain serve``: defaults < config file (YAML/TOML) < COXSWAIN_* env < flags.

Every option is a field here; the environment variable is ``COXSWAIN_`` + its upper-case
name (``COXSWAIN_LEASE_TTL_MS=15000``), list options take JSON in the environment
(``COXSWAIN_INPUT='["kafka.orders:8"]'``). A config file (``--config`` or
``COXSWAIN_CONFIG_FILE``) holds the same names in snake_case or kebab-case.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import tomllib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from checkpoint.model import ResetPolicy
from common.kafka_clients import KafkaClientSettings, load
from common.secrets import read_secret
from common.tls import ServerTls
from coordinator.store.zk_acl import ZkIdentity
from grouping.groupers import GROUPERS
from grouping.key_bucket import is_power_of_two
from grouping.key_hash import KeyHash
from grouping.model import SystemStreamPartition

KINESIS = "kinesis"  # the system name of Kinesis inputs (kinesis.STREAM)


class SettingsError(ValueError):
    """A setting is invalid; the message says which and why."""


def parse_input_spec(spec: str) -> tuple[str, str, int | None]:
    """``SYSTEM.STREAM:PARTITIONS`` or ``SYSTEM.STREAM`` (count discovered from Kafka) ->
    (system, stream, count or None)."""
    name, sep, count = spec.rpartition(":")
    if not sep:
        name, count = spec, ""
    system, dot, stream = name.partition(".")
    if not dot or not system or not stream:
        raise SettingsError(
            f"input {spec!r} must look like SYSTEM.STREAM:PARTITIONS (e.g. kafka.orders:8), "
            "or SYSTEM.STREAM with --kafka-bootstrap")
    if not sep:
        return system, stream, None
    if system == KINESIS:
        raise SettingsError(f"input {spec!r}: a Kinesis stream's partitions are its shards, "
                            f"listed from the stream: give it as {name} without a count")
    if not count.isdigit() or int(count) < 1:
        raise SettingsError(f"input {spec!r}: the partition count must be a positive integer")
    return system, stream, int(count)


def parse_input(spec: str) -> list[SystemStreamPartition]:
    """``SYSTEM.STREAM:PARTITIONS`` (e.g. ``kafka.orders:8``) -> its partitions (none for
    a stream whose count is discovered)."""
    system, stream, count = parse_input_spec(spec)
    return [SystemStreamPartition(system, stream, p) for p in range(count or 0)]


def default_replica_id() -> str:
    """hostname-pid: unique per process on a host."""
    return f"{socket.gethostname()}-{os.getpid()}"


class Settings(BaseSettings):
    """Configuration of one coordinator replica."""

    model_config = SettingsConfigDict(env_prefix="COXSWAIN_", extra="forbid",
                                      populate_by_name=True)

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    data_dir: Path = Path("coxswain-data")
    store: str | None = Field(None, description="SQLAlchemy URL; default SQLite in data_dir")
    input: list[str] = Field(default_factory=list, description="SYSTEM.STREAM:PARTITIONS")
    grouper: str = "GroupByPartition"
    elasticity_factor: int = 1
    max_elasticity_factor: int = 64
    stateful: bool = False
    lease_ttl_ms: int = Field(10_000, ge=100)
    heartbeat_interval_ms: int = Field(2_000, ge=10)
    debounce_ms: int = Field(1_000, ge=0)
    barrier_timeout_ms: int = Field(30_000, ge=100)
    barrier_max_ms: int = Field(
        120_000, ge=100, description="how long past its timeout a barrier waits for "
        "processors that heartbeat and report handing over (counted from its start)")
    probing_interval_ms: int = Field(600_000, ge=100)
    probing_min_interval_ms: int = Field(
        5_000, ge=0, description="a probing rebalance as soon as a warm-up caught up, at most "
                                 "once per this interval; at or above probing_interval_ms "
                                 "the timer alone probes")
    poll_close_grace_ms: int = Field(
        1500, ge=0, description="a processor whose long poll's connection closes and that "
        "neither polls again nor heartbeats within this leaves at once, not at its lease's "
        "expiry (0: only the lease TTL)")
    autosize_sample_interval_ms: int = Field(
        5_000, ge=100, description="how often the autosizer samples the workers' stats")
    autosize_window_ms: int = Field(
        60_000, ge=500, description="the autosizer decides on the samples of this window "
                                    "(and only once they span a third of it)")
    acceptable_recovery_lag: int = Field(10_000, ge=0)
    num_standbys: int = Field(0, ge=0)
    max_warmup_replicas: int = Field(2, ge=1)
    balance_factor: int = Field(1, ge=1)
    keep_job_models: int = Field(10, ge=2)
    reset_policy: ResetPolicy = ResetPolicy.EARLIEST
    bucket_signal_min_records: int = Field(
        1000, ge=1, description="a partition's sampled records from which its empty and hot "
                                "key buckets are judged")
    key_hash: KeyHash | None = Field(
        None, description="the key-bucket hash (xxhash64, crc32); unset: the job's own, "
                          "xxhash64 for a new job")
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_wait_ms: int = Field(60_000, ge=0, description="upper bound of a long poll")
    body_timeout_ms: int = Field(30_000, ge=100, description="a request body arriving slower "
                                 "than this between chunks gets 408")
    header_timeout_ms: int = Field(10_000, ge=100, description="a connection whose request "
                                   "headers are not complete within this is closed")
    kafka_bootstrap: str | None = Field(
        None, description="Kafka bootstrap servers: inputs given as SYSTEM.STREAM get their "
                          "partition count from Kafka, polled by the leader")
    kafka_config: list[str] = Field(
        default_factory=list, description="properties files of Kafka client settings "
                                          "(librdkafka names), for every Kafka client")
    kafka_option: list[str] = Field(
        default_factory=list, description="KEY=VALUE Kafka client settings over "
                                          "kafka_config's; secrets as ${env:NAME} or "
                                          "${file:PATH}")
    partition_poll_interval_ms: int = Field(30_000, ge=100)
    kinesis_endpoint: str | None = Field(
        None, description="Kinesis API endpoint for kinesis.STREAM inputs (default: AWS's)")
    kinesis_region: str | None = Field(
        None, description="AWS region of the Kinesis streams (default: $AWS_REGION, else "
                          "us-east-1)")
    metadata_store: Literal["sql", "zookeeper", "kafka"] | None = Field(
        None, description="where job models, leases, barriers and locality live (default: "
                          "zookeeper with --zk, else sql); kafka = a coordinator stream")
    zk: str | None = Field(None, description="HOST:PORT[,...][/chroot]: HA on ZooKeeper")
    job: str = Field("default", pattern=r"^[A-Za-z0-9_.-]{1,128}$",
                     description="job name: its root znode is /coxswain/{job}")
    zk_auth: SecretStr | None = Field(
        None, description="USER:PASSWORD for ZooKeeper digest auth (the environment or a "
                          "config file; on the command line: zk_auth_file)")
    zk_auth_file: Path | None = Field(None, description="a file holding zk_auth")
    zk_auth_scheme: Literal["digest", "sasl"] = Field(
        "digest", description="how zk_auth authenticates: ZooKeeper's digest scheme, or "
                              "SASL DIGEST-MD5 (the server configured with a SASL "
                              "authentication provider)")
    zk_session_timeout_ms: int = Field(6_000, ge=400)
    leader_lease_ms: int = Field(
        10_000, ge=500, description="leadership lease of a coordinator on a shared SQL store "
                                    "without ZooKeeper (one leader per store)")
    tls_cert: str | None = Field(None, description="serve HTTPS with this certificate "
                                                   "chain (PEM), with tls_key")
    tls_key: str | None = Field(None, description="the private key of tls_cert (PEM)")
    tls_client_ca: str | None = Field(
        None, description="mutual TLS: require client certificates signed by this CA")
    worker_token: SecretStr | None = None
    admin_token: SecretStr | None = None
    worker_token_file: Path | None = None
    admin_token_file: Path | None = None
    insecure: bool = False
    replica_id: str = Field(default_factory=default_replica_id)
    log_json: bool = False
    log_level: str = "INFO"
    config_file: Path | None = None

    @field_validator("grouper")
    @classmethod
    def _known_grouper(cls, value: str) -> str:
        if value not in GROUPERS:
            raise ValueError(f"unknown grouper {value!r}; known: {', '.join(sorted(GROUPERS))}")
        return value

    @field_validator("elasticity_factor", "max_elasticity_factor")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if not is_power_of_two(value):
            raise ValueError(f"must be a power of two, got {value}")
        return value

    @field_validator("input")
    @classmethod
    def _inputs_parse(cls, value: list[str]) -> list[str]:
        for spec in value:
            try:
                parse_input(spec)
            except SettingsError as e:
                raise ValueError(str(e)) from e
        return value

    def inputs(self) -> list[SystemStreamPartition]:
        """Every input partition given with its count."""
        return [ssp for spec in self.input for ssp in parse_input(spec)]

    def monitored_streams(self) -> list[tuple[str, str]]:
        """(system, stream) of the inputs given without a count: discovered from Kafka."""
        return [(system, stream) for system, stream, count in map(parse_input_spec, self.input)
                if count is None and system != KINESIS]

    def shard_streams(self) -> list[tuple[str, str]]:
        """(system, stream) of the Kinesis inputs: their shards are listed and polled."""
        return [(system, stream) for system, stream, _ in map(parse_input_spec, self.input)
                if system == KINESIS]

    def store_url(self) -> str:
        """The store URL (default: SQLite file in data_dir)."""
        return self.store or f"sqlite:///{self.data_dir / 'coxswain.db'}"

    def metadata_backend(self) -> str:
        """``sql``, ``zookeeper`` or ``kafka``."""
        return self.metadata_store or ("zookeeper" if self.zk else "sql")

    @model_validator(mode="after")
    def _backend_is_configured(self) -> Settings:
        backend = self.metadata_backend()
        if backend == "zookeeper" and not self.zk:
            raise ValueError("--metadata-store zookeeper needs --zk")
        if backend == "kafka" and not self.kafka_bootstrap:
            raise ValueError("--metadata-store kafka needs --kafka-bootstrap")
        if backend != "zookeeper" and self.zk:
            raise ValueError(f"--zk is for --metadata-store zookeeper, not {backend}")
        return self

    @model_validator(mode="after")
    def _kafka_settings_load(self) -> Settings:
        self.kafka_client()  # a typo or a literal secret in an option: told at start
        return self

    @model_validator(mode="after")
    def _secret_files_read(self) -> Settings:
        for field, path in (("worker_token", self.worker_token_file),
                            ("admin_token", self.admin_token_file),
                            ("zk_auth", self.zk_auth_file)):
            if path is not None:
                setattr(self, field, SecretStr(read_secret(path, field + "_file")))
        if self.zk_auth is not None:
            user, sep, password = self.zk_auth.get_secret_value().partition(":")
            if not sep or not user or not password:
                raise ValueError("zk_auth must be USER:PASSWORD")
            if self.metadata_backend() != "zookeeper":
                raise ValueError("ZooKeeper auth (zk_auth) is for --zk")
        return self

    def zk_identity(self) -> ZkIdentity | None:
        """Who the coordinator is to ZooKeeper (None: anonymous)."""
        if self.zk_auth is None:
            return None
        user, _, password = self.zk_auth.get_secret_value().partition(":")
        return ZkIdentity(self.zk_auth_scheme, user, password)

    def kafka_client(self) -> KafkaClientSettings | None:
        """Every Kafka client's settings (None: no Kafka brokers given)."""
        if not self.kafka_bootstrap and not self.kafka_config and not self.kafka_option:
            return None
        return load(self.kafka_bootstrap, self.kafka_config, self.kafka_option)

    @model_validator(mode="after")
    def _tls_is_whole(self) -> Settings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key (HTTPS)")
        return self

    def server_tls(self) -> ServerTls | None:
        """HTTPS, when a certificate was given."""
        if self.tls_cert is None or self.tls_key is None:
            return None
        return ServerTls(self.tls_cert, self.tls_key, self.tls_client_ca)

    @model_validator(mode="after")
    def _discovery_needs_kafka(self) -> Settings:
        if self.monitored_streams() and not self.kafka_bootstrap:
            streams = ", ".join(f"{a}.{b}" for a, b in self.monitored_streams())
            raise ValueError(f"inputs without a partition count ({streams}) need "
                             "--kafka-bootstrap to discover it")
        return self

    def check_bind_is_safe(self) -> None:
        """Refuse a non-loopback bind without strong tokens unless --insecure was given."""
        if self.insecure or _is_loopback(self.host):
            return
        weak = [name for name, token in (("--worker-token", self.worker_token),
                                         ("--admin-token", self.admin_token))
                if token is None or not _strong(token.get_secret_value())]
        if weak:
            raise SettingsError(
                f"refusing to listen on {self.host} without {' and '.join(weak)} of at least "
                f"{MIN_TOKEN_LENGTH} characters and no whitespace (or pass --insecure to "
                "accept unauthenticated access)")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Flags (init) > environment > config file > defaults."""
        path = _config_path(init_settings)
        file_source = InitSettingsSource(settings_cls, load_config_file(path) if path else {})
        return (init_settings, env_settings, file_source)


MIN_TOKEN_LENGTH = 16


def _strong(token: str) -> bool:
    return len(token) >= MIN_TOKEN_LENGTH and not any(c.isspace() for c in token)


def _config_path(init_settings: PydanticBaseSettingsSource) -> Path | None:
    given = init_settings().get("config_file") or os.environ.get("COXSWAIN_CONFIG_FILE")
    return Path(given) if given else None


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML (.yaml/.yml) or TOML (.toml) config file into settings names."""
    try:
        text = path.read_text()
    except OSError as e:
        raise SettingsError(f"cannot read config file {path}: {e.strerror}") from e
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise SettingsError(f"config file {path} is not valid: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"config file {path} must hold a mapping of settings")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _is_loopback(host: str) -> bool:
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
