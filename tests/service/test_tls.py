"""HTTPS on the REST API (issue #51): ``coxswain serve --tls-cert/--tls-key``, mutual TLS
with ``--tls-client-ca``, and the clients' ``--ca-file``/``--client-cert``/``--client-key``
(the worker's coordinator client, the CLI). Certificates made here with ``openssl`` on
loopback; a real server process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from common.tls import ClientTls
from tests.infra.certs import Certs, make_certs
from tests.service.server import Server
from worker.client import CoordinatorClient


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls"))


def _server(tmp_path: Path, certs: Certs, *extra: str) -> Server:
    return Server(tmp_path / "data", ["--tls-cert", str(certs.server_cert), "--tls-key",
                                      str(certs.server_key), *extra],
                  verify=ClientTls(str(certs.ca), str(certs.client_cert),
                                   str(certs.client_key)).context())


@pytest.fixture
def https(tmp_path: Path, certs: Certs) -> Iterator[Server]:
    server = _server(tmp_path, certs).start()
    yield server
    server.stop()


def test_the_api_the_status_page_and_the_docs_over_https(https: Server, certs: Certs
                                                         ) -> None:
    trusted = ClientTls(str(certs.ca)).context()
    for path in ("/healthz", "/", "/docs", "/openapi.json", "/status"):
        answer = httpx.get(f"{https.url}{path}", verify=trusted, timeout=10)
        assert answer.status_code == 200, (path, answer.text[:200])
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{https.url}/healthz", timeout=10)  # the system's CAs do not know it
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        httpx.get(f"{https.url}/healthz", verify=ClientTls(str(certs.other_ca)).context(),
                  timeout=10)
    with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port: no answer
        httpx.get(f"http://127.0.0.1:{https.port}/healthz", timeout=5)


def test_the_worker_client_and_the_cli_trust_the_given_ca(https: Server, certs: Certs
                                                          ) -> None:
    client = CoordinatorClient(https.url, verify=ClientTls(str(certs.ca)).context(),
                               retry_for_s=5)
    try:
        registered = client.register("w1", "host-a")
        assert registered.processor_id == "w1"
        client.heartbeat("w1", {})
    finally:
        client.close()
    status = subprocess.run(
        [sys.executable, "-m", "service.cli", "status", "--url", https.url, "--ca-file",
         str(certs.ca)], capture_output=True, text=True, timeout=60, check=False)
    assert status.returncode == 0, status.stderr
    assert "w1" in status.stdout
    untrusted = subprocess.run(
        [sys.executable, "-m", "service.cli", "status", "--url", https.url],
        capture_output=True, text=True, timeout=60, check=False)
    assert untrusted.returncode == 1
    assert f"cannot reach {https.url}" in untrusted.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "service.cli", "status", "--url", https.url, "--ca-file",
         "/nonexistent/ca.pem"], capture_output=True, text=True, timeout=60, check=False)
    assert missing.returncode == 1
    assert "--ca-file /nonexistent/ca.pem: no such file" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_mutual_tls_refuses_a_client_without_a_certificate_from_its_ca(
    tmp_path: Path, certs: Certs,
) -> None:
    server = _server(tmp_path, certs, "--tls-client-ca", str(certs.ca)).start()
    try:
        without = ClientTls(str(certs.ca)).context()
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{server.url}/healthz", verify=without, timeout=10).raise_for_status()
        tls = ClientTls(str(certs.ca), str(certs.client_cert), str(certs.client_key))
        client = CoordinatorClient(server.url, verify=tls.context(), retry_for_s=5)
        try:
            assert client.register("w1", "host-a").processor_id == "w1"
        finally:
            client.close()
    finally:
        server.stop()


def test_tls_settings_that_do_not_fit_are_refused_at_start(tmp_path: Path, certs: Certs
                                                           ) -> None:
    for args, said in (
            (["--tls-cert", str(certs.server_cert)], "--tls-cert and --tls-key go together"),
            (["--tls-client-ca", str(certs.ca)], "--tls-client-ca needs --tls-cert"),
            (["--tls-cert", str(tmp_path / "none.pem"), "--tls-key", str(certs.server_key)],
             f"--tls-cert {tmp_path / 'none.pem'}: no such file")):
        result = subprocess.run(
            [sys.executable, "-m", "service.cli", "serve", "--port", "0", "--data-dir",
             str(tmp_path / "data"), *args], capture_output=True, text=True, timeout=60,
            check=False)
        assert result.returncode == 1, result.stderr
        assert said in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
