"""The HTTP edge under hostile or broken clients: chunked bodies over the limit, slow and
abandoned bodies, auth before parsing, weak tokens, and error answers as documented."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from service.settings import Settings, SettingsError
from tests.service.conftest import StartServer

ARGS = ("--input", "kafka.orders:2", "--debounce-ms", "50", "--max-body-bytes", "2048")


def _chunks(total: int) -> Iterator[bytes]:
    yield b'{"locationId": "'
    for _ in range(total // 512):
        yield b"x" * 512
    yield b'"}'


def test_chunked_bodies_over_the_limit_get_413_on_every_route(
    start_server: StartServer,
) -> None:
    server = start_server(*ARGS, "--admin-token", "a" * 20, "--worker-token", "w" * 20)
    with server.client("a" * 20) as c:
        for path in ("/processors", "/processors/w1/heartbeat", "/scale", "/checkpoints"):
            r = c.post(path, content=_chunks(8192),
                       headers={"content-type": "application/json"})
            assert r.status_code == 413, (path, r.status_code, r.text)
            assert r.json()["error"] == "payload_too_large"
        # and a body under the limit, chunked too, still works
        ok = c.post("/processors", content=iter([b'{"locationId": ', b'"host-a"}']),
                    headers={"content-type": "application/json"})
        assert ok.status_code == 201, ok.text


def _raw(port: int, request: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(request)
    return sock


def test_a_slow_body_gets_408_and_an_abandoned_one_leaves_no_error_in_the_log(
    start_server: StartServer,
) -> None:
    server = start_server(*ARGS, "--body-timeout-ms", "500")
    head = (b"POST /checkpoints HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 200\r\n\r\n")
    slow = _raw(server.port, head + b'{"processorId": ')
    received = b""
    try:
        while chunk := slow.recv(4096):  # the server closes after its answer
            received += chunk
    finally:
        slow.close()
    answer = received.decode()
    assert answer.startswith("HTTP/1.1 408"), answer
    assert "request_timeout" in answer
    for _ in range(5):  # clients that disconnect in the middle of a commit
        _raw(server.port, head + b'{"processorId": "w1", "jobMo').close()
    time.sleep(0.5)
    with server.client() as c:
        assert c.get("/healthz").status_code == 200
    log = server.log()
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]


def test_auth_comes_before_parsing_and_errors_are_as_documented(
    start_server: StartServer,
) -> None:
    server = start_server(*ARGS, "--admin-token", "a" * 20, "--worker-token", "w" * 20)
    with server.client() as anon, server.client("w" * 20) as worker:
        for path in ("/processors", "/processors/w1/heartbeat", "/jobmodel/1/ack",
                     "/checkpoints"):
            r = anon.post(path, content=b"{not json", headers={"content-type":
                                                                "application/json"})
            assert r.status_code == 401, (path, r.text)
        refused = worker.post("/scale", content=b"{not json",
                              headers={"content-type": "application/json"})
        assert refused.status_code == 403, refused.text
        malformed = worker.post("/processors", content=b"{not json",
                                headers={"content-type": "application/json"})
        assert malformed.status_code == 400 and malformed.json()["error"] == "malformed_json"
        wrong_method = worker.put("/scale", json={})
        assert wrong_method.status_code == 405
        assert set(wrong_method.headers["allow"].replace(" ", "").split(",")) == {"GET",
                                                                                  "POST"}
        both = worker.get("/checkpoints", params={"processorId": "w1",
                                                  "taskName": "Partition 0"})
        assert both.status_code in (404, 422), both.text  # never one ignored silently
        spec = anon.get("/openapi.json").json()
        assert "HTTPValidationError" not in str(spec)
        heartbeat = spec["paths"]["/processors/{processor_id}/heartbeat"]["post"]
        assert {"400", "401", "403", "413", "422"} <= set(heartbeat["responses"])
        assert heartbeat["responses"]["422"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorBody"}
        assert "admin token" in spec["paths"]["/scale"]["post"]["responses"]["403"][
            "description"]


def test_both_filters_of_a_checkpoint_read_are_refused(start_server: StartServer) -> None:
    server = start_server(*ARGS, "--lease-ttl-ms", "60000")
    with httpx.Client(base_url=server.url, timeout=30) as c:
        c.post("/processors", json={"processorId": "w1", "locationId": "a"})
        c.get("/jobmodel", params={"since": 0, "waitMs": 10000})
        both = c.get("/checkpoints", params={"processorId": "w1", "taskName": "Partition 0"})
        assert both.status_code == 422 and "not both" in both.text


@pytest.mark.parametrize("token", ["x", " " * 20, "short-token", "has a space in it!!"])
def test_weak_tokens_do_not_open_a_public_address(token: str) -> None:
    strong = "s" * 16
    with pytest.raises(SettingsError, match="at least 16 characters"):
        Settings(host="0.0.0.0", worker_token=token, admin_token=strong).check_bind_is_safe()
    with pytest.raises(SettingsError):
        Settings(host="0.0.0.0", worker_token=strong, admin_token=token).check_bind_is_safe()
    Settings(host="0.0.0.0", worker_token=strong, admin_token=strong).check_bind_is_safe()


def test_slow_header_connections_are_closed_and_real_clients_still_served(
    start_server: StartServer,
) -> None:
    server = start_server(*ARGS, "--header-timeout-ms", "1000")
    slow = [_raw(server.port, b"GET /healthz HTTP/1.1\r\nhost: x\r\n") for _ in range(200)]
    try:
        started = time.monotonic()
        with server.client() as c:
            assert c.get("/healthz").status_code == 200  # served meanwhile
        closed = 0
        for sock in slow:
            sock.settimeout(max(0.1, 10 - (time.monotonic() - started)))
            try:
                sock.sendall(b"x-drip: 1\r\n")  # a byte now and then keeps nothing open
                closed += sock.recv(1) == b""
            except TimeoutError:
                pass  # still open: counted as not closed
            except OSError:
                closed += 1  # reset by the server
        assert closed == len(slow)
        assert time.monotonic() - started < 10
    finally:
        for sock in slow:
            sock.close()
