"""High availability on a real ZooKeeper: three coordinator replicas of one job, simulated
workers talking to any replica, and the leader killed, paused, or cut off."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from service.local.zookeeper import ZooKeeperEnsemble
from tests.service.ha import Fleet, index_of, replicas, status, wait_leader
from tests.service.workers import offsets_for

FAST = ("--input", "kafka.orders:16", "--debounce-ms", "200", "--lease-ttl-ms", "10000",
        "--zk-session-timeout-ms", "3000")


def commit_everything(fleet: Fleet, model: dict[str, Any], offset: int) -> None:
    for pid, container in model["containers"].items():
        checkpoints = {name: offsets_for(task, offset)
                       for name, task in container["tasks"].items()}
        if not checkpoints:
            continue  # more workers than tasks
        r = fleet.call("POST", "/checkpoints", json={
            "processorId": pid, "jobModelVersion": model["version"],
            "checkpoints": checkpoints}, headers=fleet.lease(pid))
        assert r.status_code == 200, r.text


def committed_offsets(fleet: Fleet, model: dict[str, Any]) -> set[str]:
    names = [n for c in model["containers"].values() for n in c["tasks"]]
    r = fleet.call("GET", "/checkpoints", params={"taskName": names})
    assert r.status_code == 200, r.text
    return {o["offset"] for cp in r.json().values() for o in cp["inputOffsets"]}


def test_leader_killed_while_20_workers_heartbeat_and_commit(
    tmp_path: Path, zookeeper: ZooKeeperEnsemble
) -> None:
    with replicas(tmp_path, zookeeper.connect_string, 3, *FAST) as servers:
        leader = wait_leader(servers)
        fleet = Fleet(servers, 20)
        fleet.register_all()
        with fleet.heartbeating():
            before = fleet.settle()
            commit_everything(fleet, before, 100)
            servers[index_of(leader)].kill()
            new_leader = wait_leader(servers, not_=leader)
            commit_everything(fleet, before, 200)  # no leader needed to commit
            # the new leader is not made to rebalance: the same workers, the same model
            time.sleep(1.0)
            after = fleet.settle()
        assert new_leader != leader
        assert fleet.lost_leases == [] and fleet.errors == []
        assert after["version"] >= before["version"]
        assert set(after["containers"]) == set(fleet.ids)
        assert committed_offsets(fleet, after) == {"200"}
        live = [s for s in servers if s.proc is not None and s.proc.poll() is None]
        versions = {st["latestVersion"] for s in live if (st := status(s))}
        assert versions == {after["version"]}  # every replica serves the same version
        fleet.call("POST", "/scale", json={"elasticityFactor": 2})
        scaled = fleet.settle()
        assert scaled["version"] > after["version"]
        assert scaled["config"]["elasticityFactor"] == 2
        assert committed_offsets(fleet, scaled) == {"200"}  # children inherit the offsets


def test_a_paused_leader_cannot_publish_after_it_was_replaced(
    tmp_path: Path, zookeeper: ZooKeeperEnsemble
) -> None:
    with replicas(tmp_path, zookeeper.connect_string, 2, *FAST) as servers:
        leader = wait_leader(servers)
        old = servers[index_of(leader)]
        other = servers[1 - index_of(leader)]
        fleet = Fleet([other], 2)
        fleet.register_all()
        first = fleet.settle()
        # the old leader has a rebalance due (a join it saw) when it is frozen
        r = httpx.post(f"{old.url}/processors",
                       json={"processorId": "late", "locationId": "host-x"})
        assert r.status_code == 201
        fleet.tokens["late"] = r.json()["leaseToken"]
        assert old.proc is not None
        old.proc.send_signal(signal.SIGSTOP)
        try:
            new_leader = wait_leader([other], not_=leader)
            with fleet.heartbeating(0.3):
                fleet.ids.append("late")
                replaced = fleet.settle()
                old.proc.send_signal(signal.SIGCONT)
                time.sleep(4)  # the old leader wakes up with its stale view
                final = fleet.settle()
        finally:
            old.proc.send_signal(signal.SIGCONT)
        assert new_leader != leader
        assert replaced["version"] > first["version"]
        assert final["version"] == replaced["version"]  # nothing published by the old one
        log = old.log()
        assert ("no longer the leader" in log or "refused by the store" in log
                or "session lost" in log), log[-3000:]
        st = status(old)
        assert st is not None and st["leaderId"] == new_leader
        assert st["latestVersion"] == final["version"]


def test_processors_registered_on_a_follower_join_when_the_leader_hears_them_first(
    tmp_path: Path, zookeeper: ZooKeeperEnsemble
) -> None:
    with replicas(tmp_path, zookeeper.connect_string, 2, *FAST) as servers:
        leader = servers[index_of(wait_leader(servers))]
        follower = servers[1 - servers.index(leader)]
        fleet = Fleet([leader], 1)
        fleet.register_all()
        first = fleet.settle()
        # each registers through the follower, and its first heartbeat reaches the leader
        # before the leader's sweep would have read the new lease (behind a load balancer
        # this is the usual order); the leader must still see a join
        for pid in ("w01", "w02", "w03"):
            r = httpx.post(f"{follower.url}/processors",
                           json={"processorId": pid, "locationId": "host-1"}, timeout=5)
            assert r.status_code == 201, r.text
            fleet.tokens[pid] = r.json()["leaseToken"]
            beat = httpx.post(f"{leader.url}/processors/{pid}/heartbeat", json={}, timeout=5,
                              headers=fleet.lease(pid))
            assert beat.status_code == 200, beat.text
            fleet.ids.append(pid)
        with fleet.heartbeating(0.3):
            joined = fleet.settle(timeout_s=20)
        assert joined["version"] > first["version"]
        assert fleet.lost_leases == []


def test_zookeeper_down_read_only_then_recovers(tmp_path: Path) -> None:
    zk = ZooKeeperEnsemble.start(1)
    try:
        with replicas(tmp_path, zk.connect_string, 2, *FAST) as servers:
            wait_leader(servers)
            fleet = Fleet(servers, 3)
            fleet.register_all()
            model = fleet.settle()
            zk.stop_member(1, signal.SIGKILL)
            time.sleep(1.0)
            for s in servers:
                ready = httpx.get(f"{s.url}/readyz", timeout=5)
                assert ready.status_code == 503
                served = httpx.get(f"{s.url}/jobmodel", timeout=5)  # the last model, read-only
                assert served.status_code == 200
                assert served.json()["version"] == model["version"]
                beat = httpx.post(f"{s.url}/processors/w00/heartbeat", json={}, timeout=15,
                                  headers=fleet.lease("w00"))
                assert beat.status_code == 503
                assert beat.json()["error"] == "store_unavailable"
            zk.start_member(1)
            deadline = time.monotonic() + 30
            while not all(httpx.get(f"{s.url}/readyz", timeout=5).status_code == 200
                          for s in servers):
                assert time.monotonic() < deadline, "replicas did not recover"
                time.sleep(0.2)
            fleet.heartbeat_all()
            assert fleet.lost_leases == []
            assert fleet.settle()["version"] >= model["version"]
    finally:
        zk.stop()


def test_ensemble_restarted_member_by_member_keeps_service(tmp_path: Path) -> None:
    zk = ZooKeeperEnsemble.start(3)
    try:
        with replicas(tmp_path, zk.connect_string, 2, *FAST) as servers:
            wait_leader(servers)
            fleet = Fleet(servers, 4)
            fleet.register_all()
            with fleet.heartbeating(0.3):
                model = fleet.settle()
                for member in zk.members:
                    zk.stop_member(member.sid)
                    time.sleep(0.5)
                    zk.start_member(member.sid)
                    zk.wait_serving()
                time.sleep(1.0)
                after = fleet.settle()
            assert fleet.errors == [] and fleet.lost_leases == []
            assert after["version"] >= model["version"]
            commit_everything(fleet, after, 7)
            assert committed_offsets(fleet, after) == {"7"}
    finally:
        zk.stop()


def test_long_polls_on_a_follower_wake_with_the_leaders_publication(
    tmp_path: Path, zookeeper: ZooKeeperEnsemble
) -> None:
    with replicas(tmp_path, zookeeper.connect_string, 2, *FAST) as servers:
        leader = wait_leader(servers)
        follower = servers[1 - index_of(leader)]
        fleet = Fleet(servers, 2)
        fleet.register_all()
        model = fleet.settle()
        with httpx.Client(base_url=follower.url, timeout=30) as c, \
                httpx.Client(base_url=servers[index_of(leader)].url, timeout=30) as lc:
            answers: list[httpx.Response] = []
            waiter = threading.Thread(target=lambda: answers.append(c.get(
                "/jobmodel", params={"since": model["version"], "waitMs": 20_000,
                                     "processorId": "w00"})))
            waiter.start()
            time.sleep(0.3)
            assert lc.post("/scale", json={"elasticityFactor": 4}).status_code == 202
            waiter.join(25)
            assert answers and answers[0].status_code == 200
            woke = answers[0].json()
            assert woke["version"] > model["version"]
            assert woke["config"]["elasticityFactor"] == 4
            # and an ack through the follower completes the leader's barrier
            for pid in woke["containers"]:
                assert c.post(f"/jobmodel/{woke['version']}/ack", json={"processorId": pid},
                              headers=fleet.lease(pid)).status_code == 200
            assert fleet.settle()["version"] == woke["version"]
            deadline = time.monotonic() + 5  # the leader learns it through its watch
            while lc.get("/status").json()["activeVersion"] != woke["version"]:
                assert time.monotonic() < deadline, "the leader never saw the barrier done"
                time.sleep(0.02)
