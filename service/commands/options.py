"""Options several commands share: how a client reaches the coordinator (TLS, its bearer
token) and how every Kafka client reaches the brokers (``--kafka-config``,
``--kafka-option``).

Secrets come from files or the environment. A secret given on the command line is
readable by every user of the host (``/proc/PID/cmdline``): a token there is still
accepted, with a warning naming the safer way (refusing it would break every deployment
that passes one today); a Kafka secret there is refused (the option is new).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from common.secrets import SecretFileError, read_secret

if TYPE_CHECKING:
    from common.kafka_clients import KafkaClientSettings
    from common.tls import ClientTls

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def warn(message: str) -> None:
    """A warning about how the command was started, before any logging is set up."""
    print(f"coxswain: warning: {message}", file=sys.stderr, flush=True)


def argv_secret_warning(flag: str, safer: str) -> str:
    return (f"{flag} on the command line is visible to every user of this host "
            f"(/proc/PID/cmdline); use {safer}")


def read_secret_file(path: str, flag: str) -> str:
    """The secret in the file at ``path`` (its first line, without the newline)."""
    try:
        return read_secret(path, flag)
    except SecretFileError as e:
        raise SystemExit(f"coxswain: {e}") from None


def add_client_tls_options(p: argparse.ArgumentParser) -> None:
    """``--ca-file``, ``--client-cert`` and ``--client-key``: a client of an HTTPS
    coordinator (``--tls-cert``; mutual TLS with ``--tls-client-ca``)."""
    p.add_argument("--ca-file", default=os.environ.get("COXSWAIN_CA_FILE"),
                   help="trust the coordinator's certificate from this CA bundle (PEM; "
                        "default $COXSWAIN_CA_FILE, else the system's CAs)")
    p.add_argument("--client-cert", default=os.environ.get("COXSWAIN_CLIENT_CERT"),
                   help="present this certificate (PEM) to a coordinator requiring client "
                        "certificates (default $COXSWAIN_CLIENT_CERT), with --client-key")
    p.add_argument("--client-key", default=os.environ.get("COXSWAIN_CLIENT_KEY"),
                   help="the private key of --client-cert (default $COXSWAIN_CLIENT_KEY)")


def client_tls(args: argparse.Namespace) -> ClientTls | None:
    """The TLS options a client command was given (None: none), checked."""
    from common.tls import ClientTls, TlsConfigError  # noqa: PLC0415 (a fast CLI start)

    if not (args.ca_file or args.client_cert or args.client_key):
        return None
    try:
        tls = ClientTls(args.ca_file, args.client_cert, args.client_key)
        tls.context()  # the files read now: a wrong path is told before anything starts
    except TlsConfigError as e:
        raise SystemExit(f"coxswain: {e}") from None
    return tls


def add_token_options(p: argparse.ArgumentParser, env: str, what: str) -> None:
    """``--token-file`` and ``--token`` (warned about): the bearer token a client sends.
    Neither shows a default in ``--help``: a token does not belong there."""
    p.add_argument("--token-file", metavar="FILE",
                   help=f"read the {what} from this file (its first line); default "
                        f"${env}")
    p.add_argument("--token", default=None,
                   help=f"the {what} itself (visible to every user of the host: prefer "
                        "--token-file or the environment)")
    p.set_defaults(token_env=env)


def resolve_token(args: argparse.Namespace) -> None:
    """``args.token`` from ``--token-file``, ``--token`` (with a warning) or the
    environment, in that order."""
    env: str = args.token_env
    if args.token_file:
        args.token = read_secret_file(args.token_file, "--token-file")
    elif args.token:
        warn(argv_secret_warning("--token", f"--token-file FILE or ${env}"))
    else:
        args.token = os.environ.get(env) or None


def add_kafka_options(p: argparse.ArgumentParser) -> None:
    """``--kafka-bootstrap``, ``--kafka-config`` and ``--kafka-option``."""
    p.add_argument("--kafka-bootstrap",
                   help="Kafka bootstrap servers (default: bootstrap.servers of "
                        f"--kafka-config, else {DEFAULT_BOOTSTRAP})")
    p.add_argument("--kafka-config", action="append", default=[], metavar="FILE",
                   help="a properties file of Kafka client settings with librdkafka's "
                        "names (security.protocol, sasl.mechanism, sasl.username, "
                        "sasl.password, ssl.ca.location, ...), given to every Kafka client "
                        "the worker makes; repeatable (default: $COXSWAIN_KAFKA_CONFIG)")
    p.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE",
                   help="one Kafka client setting, repeatable, over --kafka-config's; a "
                        "secret as ${env:NAME} or ${file:PATH}, never literally")


def kafka_settings(args: argparse.Namespace,
                   refuse_unanswered: bool = False) -> KafkaClientSettings:
    """Every Kafka client's settings from the command's options, checked with librdkafka
    (an unknown or misspelled name is told now, not at the first batch). Secured brokers
    that do not answer are warned about (a coordinator goes on), or refused with
    ``refuse_unanswered`` (a worker: ``worker.start_checks`` would wait for them again)."""
    from common.kafka_clients import KafkaSettingsError, load, verify  # noqa: PLC0415

    files = list(args.kafka_config)
    given = os.environ.get("COXSWAIN_KAFKA_CONFIG", "").strip()
    if not files and given:  # one path, or a JSON list as ``coxswain serve`` takes it
        files = json.loads(given) if given.startswith("[") else [given]
    try:
        settings = load(args.kafka_bootstrap, files, args.kafka_option, warn=warn,
                        default_bootstrap=DEFAULT_BOOTSTRAP)
        unanswered = verify(settings)  # refused credentials: told now, not retried
        if unanswered is not None and refuse_unanswered:
            raise SystemExit(f"coxswain: the Kafka broker at {settings.bootstrap} did not "
                             f"answer ({unanswered}): check --kafka-bootstrap and "
                             "--kafka-config, or start the broker first")
        if unanswered is not None:
            warn(f"the Kafka brokers at {settings.bootstrap} did not answer "
                 f"({unanswered}); going on, they may come up later")
    except KafkaSettingsError as e:
        raise SystemExit(f"coxswain: {e}") from None
    return settings
