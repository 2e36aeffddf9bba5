"""What a new user meets first: the docs pages without internet, help texts, clients in a
pipe, and the documented example (docs/development.md: register, heartbeat, first job model)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import httpx

from service.cli import parser
from tests.service.conftest import StartServer


def _help(*args: str) -> str:
    """The help text, its lines joined (where argparse wraps depends on the terminal's
    width and the texts' lengths: a default may start on one line and end on the next)."""
    result = subprocess.run([sys.executable, "-m", "service.cli", *args, "--help"],
                            capture_output=True, text=True, timeout=60, check=True)
    return " ".join(result.stdout.split())


def test_docs_pages_load_their_assets_from_this_server(start_server: StartServer) -> None:
    server = start_server("--input", "kafka.orders:2")
    with server.client() as c:
        for page in ("/docs", "/redoc"):
            html = c.get(page)
            assert html.status_code == 200
            # every script and stylesheet is served here: nothing from a CDN
            urls = re.findall(r'(?:src|href)="([^"]+)"', html.text)
            assert urls, html.text
            for url in urls:
                assert url.startswith("/"), f"{page} loads {url} from elsewhere"
                asset = c.get(url)
                assert asset.status_code == 200, url
                assert len(asset.content) > 1000, url
        bundle = c.get("/docs-assets/swagger-ui-bundle.js").text
        assert "SwaggerUIBundle" in bundle
        # Swagger UI 5 renders OpenAPI 3.1, which is what the server describes itself with
        assert c.get("/openapi.json").json()["openapi"].startswith("3.1")


def test_openapi_descriptions_are_markdown_not_rst(start_server: StartServer) -> None:
    server = start_server("--input", "kafka.orders:2")
    with server.client() as c:
        text = c.get("/openapi.json").text
    assert "``" not in text
    assert "`fenced`" in text  # the commit route's description, in Markdown


def test_help_texts_show_defaults_and_no_markup() -> None:
    up = _help("dev", "up")
    assert "--kafka-port" in up and "--topic" in up and "(default: 9092)" in up
    worker = _help("worker")
    assert "(default: local[2])" in worker and "(default: 60000)" in worker
    assert "(default: 127.0.0.1:9092)" in _help("dev", "produce")
    commands = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for text in [_help(), *(_help(c) for c in commands[0].choices)]:
        assert "``" not in text


def test_client_output_into_a_closed_pipe_ends_without_a_traceback(
    start_server: StartServer,
) -> None:
    server = start_server("--input", "kafka.orders:2")
    # the reader is gone before the answer is printed, as with `coxswain status | head -0`
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "status", "--url",
                             server.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_readme_example_register_heartbeat_then_first_job_model(
    start_server: StartServer,
) -> None:
    server = start_server("--input", "kafka.orders:8")
    with httpx.Client(base_url=server.url, timeout=30) as c:
        registered = c.post("/processors", json={"processorId": "w1", "locationId": "host-a"})
        assert registered.status_code == 201
        lease = {"Coxswain-Lease-Token": registered.json()["leaseToken"]}
        assert c.post("/processors/w1/heartbeat", json={}, headers=lease).status_code == 200
        # the documented long poll waits for the first model instead
        model = c.get("/jobmodel", params={"processorId": "w1", "since": 0,
                                           "waitMs": 10000})
        assert model.status_code == 200
        assert len(model.json()["containers"]["w1"]["tasks"]) == 8
