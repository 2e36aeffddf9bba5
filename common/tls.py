"""TLS for Coxswain's REST API: what the server listens with, and what its clients (the
worker, the CLI, the autosizer loop) trust and present. Standard-library ``ssl`` only.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class TlsConfigError(ValueError):
    """A TLS file is missing or unusable; the message names it."""


def _readable(path: str, what: str) -> str:
    if not Path(path).is_file():
        raise TlsConfigError(f"{what} {path}: no such file")
    return path


@dataclass(frozen=True, slots=True)
class ServerTls:
    """The server's certificate chain and key, and (mutual TLS) the CA its clients'
    certificates must be signed by."""

    cert: str
    key: str
    client_ca: str | None = None

    def uvicorn_options(self) -> dict[str, Any]:
        """``uvicorn.run`` keyword arguments (checked readable first: uvicorn's own error
        for a missing file is a bare traceback)."""
        options: dict[str, Any] = {
            "ssl_certfile": _readable(self.cert, "--tls-cert"),
            "ssl_keyfile": _readable(self.key, "--tls-key")}
        if self.client_ca is not None:
            options["ssl_ca_certs"] = _readable(self.client_ca, "--tls-client-ca")
            options["ssl_cert_reqs"] = ssl.CERT_REQUIRED
        return options


@dataclass(frozen=True, slots=True)
class ClientTls:
    """What a client of the API trusts (a CA bundle; None: the system's) and presents
    (a certificate and key, for a server that requires them)."""

    ca_file: str | None = None
    cert: str | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise TlsConfigError("--client-cert and --client-key go together")

    def context(self) -> ssl.SSLContext:
        """An SSL context verifying the server (hostname included) against ``ca_file``
        or the system's trust store, presenting the client certificate if given."""
        if self.ca_file is not None:
            _readable(self.ca_file, "--ca-file")
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert is not None and self.key is not None:
            try:
                context.load_cert_chain(_readable(self.cert, "--client-cert"),
                                        _readable(self.key, "--client-key"))
            except ssl.SSLError as e:
                raise TlsConfigError(f"--client-cert {self.cert} / --client-key "
                                     f"{self.key}: {e}") from None
        return context


__all__ = ["ClientTls", "ServerTls", "TlsConfigError"]
