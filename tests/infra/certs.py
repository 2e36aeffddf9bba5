"""Test certificates made with ``openssl`` on loopback: a CA, a server certificate for
127.0.0.1/localhost, a client certificate, and a second CA that trusts none of them."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path  # trusts nothing here

    def server_pem(self) -> Path:
        """The server's key and certificate in one PEM file (a Kafka broker's PEM
        keystore: ``ssl.keystore.type=PEM``)."""
        both = self.server_cert.with_name("server-keystore.pem")
        both.write_text(self.server_key.read_text() + self.server_cert.read_text())
        return both


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ca(folder: Path, name: str) -> tuple[Path, Path]:
    key, cert = folder / f"{name}.key", folder / f"{name}.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert))
    return cert, key


def _signed(folder: Path, name: str, ca: tuple[Path, Path], ext: str) -> tuple[Path, Path]:
    key, csr, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem"
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
             "-keyout", str(key), "-out", str(csr))
    extfile = folder / f"{name}.ext"
    extfile.write_text(ext)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
             "-CAcreateserial", "-days", "2", "-extfile", str(extfile), "-out", str(cert))
    return cert, key


def make_certs(folder: Path) -> Certs:
    """A CA and the certificates it signed, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca(folder, "coxswain-test-ca")
    server = _signed(folder, "server", ca, "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                           "extendedKeyUsage=serverAuth\n")
    client = _signed(folder, "worker-w1", ca, "extendedKeyUsage=clientAuth\n")
    other, _ = _ca(folder, "other-ca")
    return Certs(ca[0], server[0], server[1], client[0], client[1], other)
