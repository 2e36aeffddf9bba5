"""Bearer tokens, the refusal to bind beyond loopback without them, and a restart on the
same store (kill -9): job model, barrier, leases and checkpoints survive."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.service.conftest import StartServer
from tests.service.server import Server
from tests.service.workers import SimWorker, offsets_for, wait_for_members, wait_for_version

ARGS = ("--input", "kafka.orders:2", "--debounce-ms", "50", "--lease-ttl-ms", "60000")


def test_tokens_guard_worker_and_operator_routes(start_server: StartServer) -> None:
    server = start_server(*ARGS, "--worker-token", "w-secret", "--admin-token", "a-secret")
    with server.client() as anon, server.client("w-secret") as worker, \
            server.client("a-secret") as admin, server.client("wrong") as wrong:
        missing = anon.post("/processors", json={"locationId": "h"})
        assert missing.status_code == 401
        assert missing.json()["error"] == "unauthorized"
        assert wrong.post("/processors", json={"locationId": "h"}).status_code == 403
        registered = worker.post("/processors", json={"processorId": "w1", "locationId": "h"})
        assert registered.status_code == 201
        lease = {"Coxswain-Lease-Token": registered.json()["leaseToken"]}
        assert admin.post("/processors/w1/heartbeat", json={},
                          headers=lease).status_code == 200
        denied = worker.post("/scale", json={"elasticityFactor": 2})
        assert denied.status_code == 403
        assert denied.json()["error"] == "forbidden"
        assert admin.post("/scale", json={"elasticityFactor": 2}).status_code == 202
        assert worker.post("/checkpoints/reset", json={
            "ssp": {"system": "kafka", "stream": "orders", "partition": 0},
            "offset": "1"}).status_code == 403
        assert anon.get("/jobmodel").status_code == 401  # assignments are workers' business
        assert anon.get("/jobmodel", headers={"If-None-Match": '"0"'}).status_code == 401
        assert anon.get("/checkpoints").status_code == 401
        assert worker.get("/jobmodel").status_code in (200, 404)
        assert anon.get("/status").status_code == 200  # read-only observability stays open


def test_refuses_a_public_address_without_tokens(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "serve", "--host", "0.0.0.0",
         "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert "refusing to listen on 0.0.0.0" in result.stderr


def test_restart_keeps_job_model_barrier_leases_and_checkpoints(
    start_server: StartServer, tmp_path: Path
) -> None:
    server = start_server(*ARGS, data_dir=tmp_path)
    with server.client() as c:
        w1, w2 = SimWorker(c, "w1", "host-a"), SimWorker(c, "w2", "host-b")
        w1.register()
        w2.register()
        model = wait_for_members(c, ["w1", "w2"])
        version = model["version"]
        w1.ack(version)
        w2.ack(version)
        task = model["containers"]["w1"]["tasks"]
        name = sorted(task)[0]
        assert w1.commit(version, {name: offsets_for(task[name], 77)}).status_code == 200
        c.post("/scale", json={"elasticityFactor": 2})
        pending = c.get("/jobmodel").json()
        assert pending["barrier"] == "pending"
    server.kill()

    again = start_server(*ARGS, data_dir=tmp_path)
    with again.client() as c:
        after = c.get("/jobmodel").json()
        assert after == pending  # same latest model, barrier still pending
        procs = {p["processorId"] for p in c.get("/processors").json()}
        assert procs == {"w1", "w2"}
        assert SimWorker(c, "w1", "host-a").heartbeat().status_code == 200
        children = c.get("/checkpoints", params={
            "taskName": [f"{name}_0_2", f"{name}_1_2"]}).json()
        assert {v["inputOffsets"][0]["offset"] for v in children.values()} == {"77"}
        status = c.get("/status").json()
        assert status["activeVersion"] == version
        assert status["latestVersion"] == pending["version"]


def test_server_helper_stops_by_pid(tmp_path: Path) -> None:
    server = Server(tmp_path, list(ARGS)).start()
    pid = server.proc.pid if server.proc else -1
    server.stop()
    assert server.proc is not None and server.proc.poll() is not None
    assert pid > 0


def test_a_conditional_poll_without_a_token_learns_nothing(start_server: StartServer) -> None:
    """The 304 shortcut checks the token too: an anonymous caller naming the current
    version must not learn that it is current."""
    server = start_server(*ARGS, "--worker-token", "w-secret")
    with server.client("w-secret") as worker, server.client() as anon, \
            server.client("wrong") as wrong:
        SimWorker(worker, "w1", "host-a").register()
        version = wait_for_version(worker, 0)["version"]
        etag = {"If-None-Match": f'"{version}"'}
        assert worker.get("/jobmodel", headers=etag).status_code == 304
        refused = anon.get("/jobmodel", headers=etag)
        assert refused.status_code == 401, refused.text
        assert wrong.get("/jobmodel", headers=etag).status_code == 403
    assert "was never awaited" not in server.log()


def test_a_processor_can_act_only_as_itself(start_server: StartServer) -> None:
    """The worker token says "a worker"; the lease token says which incarnation of which
    processor (the member epoch of Kafka's KIP-848)."""
    server = start_server(*ARGS, "--worker-token", "w" * 16, "--admin-token", "a" * 16)
    with server.client("w" * 16) as c, server.client("a" * 16) as admin:
        w1, w2 = SimWorker(c, "w1", "host-a"), SimWorker(c, "w2", "host-b")
        w1.register()
        w2.register()
        model = wait_for_members(c, ["w1", "w2"])
        assert w1.ack(model["version"]).status_code == 200
        task = w1.tasks(model)
        as_w2 = w2.lease  # w2 trying to pass as w1 with its own lease token
        for attempt in (
            c.post("/processors/w1/heartbeat", json={}, headers=as_w2),
            c.post(f"/jobmodel/{model['version']}/ack", json={"processorId": "w1"},
                   headers=as_w2),
            c.post("/checkpoints", headers=as_w2, json={
                "processorId": "w1", "jobModelVersion": model["version"],
                "checkpoints": {n: offsets_for(t, 5) for n, t in task.items()}}),
            c.delete("/processors/w1", headers=as_w2),
        ):
            assert attempt.status_code == 409, attempt.text
            assert attempt.json()["error"] == "fenced"
        bare = c.post("/processors/w1/heartbeat", json={})
        assert bare.status_code == 401 and bare.json()["error"] == "lease_token_required"
        assert c.delete("/processors/w1").status_code == 401
        # a new registration of w1 fences the earlier incarnation
        stale = w1.lease
        w1.register()
        old = c.post("/processors/w1/heartbeat", json={}, headers=stale)
        assert old.status_code == 409, old.text
        assert w1.heartbeat().status_code == 200
        # an operator removes a processor with the admin token alone
        assert admin.delete("/processors/w2").status_code == 204
        assert w2.heartbeat().status_code == 404
