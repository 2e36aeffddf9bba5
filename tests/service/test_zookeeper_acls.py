"""ZooKeeper digest auth and ACLs (#51) on the session's real ZooKeeper: a coordinator
with ``--zk-auth-file`` creates every znode of its job readable and writable by its
identity only (another tenant of the ensemble, anonymous or with other credentials, can
neither read nor change them), protects a tree made before auth was on, and refuses a
tree another identity owns with a message."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from coordinator.store.zk_acl import ZkAclError, ZkIdentity
from coordinator.store.zookeeper import ZkSession
from service.local.zookeeper import ZooKeeperEnsemble
from tests.conftest import ZK_SASL_PASSWORD, ZK_SASL_USER
from tests.service.conftest import StartServer
from tests.service.ha import index_of, replicas, wait_leader

USER, PASSWORD = "coxswain-job", "zk-digest-pw-2b7e9f4a"


def _client(zk: str, identity: ZkIdentity | None = None) -> KazooClient:
    options = {} if identity is None else identity.client_options()
    options.pop("default_acl", None)
    client = KazooClient(hosts=zk, **options)
    client.start(timeout=15)
    return client


@pytest.fixture
def anonymous(zookeeper: ZooKeeperEnsemble) -> Iterator[KazooClient]:
    client = _client(zookeeper.connect_string)
    yield client
    client.stop()
    client.close()


def _tree(client: KazooClient, root: str) -> list[str]:
    out, todo = [], [root]
    while todo:
        path = todo.pop()
        out.append(path)
        todo.extend(f"{path}/{c}" for c in client.get_children(path))
    return out


@pytest.mark.parametrize("scheme", ["digest", "sasl"])
def test_a_coordinator_with_zookeeper_auth_keeps_its_job_private(
    start_server: StartServer, zookeeper: ZooKeeperEnsemble, anonymous: KazooClient,
    tmp_path: Path, scheme: str,
) -> None:
    """(``sasl``: DIGEST-MD5 through pure-sasl, a user of the server's JAAS section.)"""
    job = f"acl-{uuid.uuid4().hex[:8]}"
    me = (ZkIdentity("digest", USER, PASSWORD) if scheme == "digest"
          else ZkIdentity("sasl", ZK_SASL_USER, ZK_SASL_PASSWORD))
    auth = tmp_path / "zk.auth"
    auth.write_text(f"{me.user}:{me.password}\n")
    server = start_server("--zk", zookeeper.connect_string, "--job", job,
                          "--zk-auth-file", str(auth), "--zk-auth-scheme", scheme,
                          "--input", "kafka.orders:4")
    with server.client() as c:
        r = c.post("/processors", json={"processorId": "w1", "locationId": "h1"})
        assert r.status_code in (200, 201), r.text
        deadline = time.monotonic() + 30
        while c.get("/jobmodel", params={"processorId": "w1"}).status_code != 200:
            assert time.monotonic() < deadline, "no job model (written to ZooKeeper)"
            time.sleep(0.2)
    root = f"/coxswain/{job}"
    assert job in anonymous.get_children("/coxswain")  # the shared parent lists jobs
    intruders = [anonymous, _client(zookeeper.connect_string,
                                    ZkIdentity("digest", "intruder", "guess"))]
    if scheme == "sasl":  # the same name and password under the other scheme: not it
        intruders.append(_client(zookeeper.connect_string,
                                 ZkIdentity("digest", me.user, me.password)))
    for who in intruders:
        with pytest.raises(NoAuthError):
            who.get_children(root)
        with pytest.raises(NoAuthError):
            who.set(root, b"overwritten")
        with pytest.raises(NoAuthError):
            who.delete(root, recursive=True)
    owner = _client(zookeeper.connect_string, me)
    try:
        nodes = _tree(owner, root)
        assert len(nodes) > 5  # models, leases, the election, barriers
        for path in nodes:  # every znode the coordinator made is its identity's alone
            acls, _ = owner.get_acls(path)
            assert [(a.id.scheme, a.perms) for a in acls] == [(scheme, 31)], path
    finally:
        owner.stop()
        owner.close()
    assert me.password not in server.log()


def test_a_tree_made_before_auth_is_protected_and_another_s_is_refused(
    zookeeper: ZooKeeperEnsemble, anonymous: KazooClient,
) -> None:
    root = f"/coxswain/acl-old-{uuid.uuid4().hex[:8]}"
    anonymous.create(f"{root}/jobModels/1", b"{}", makepath=True)  # world-open, as before
    session = ZkSession(zookeeper.connect_string, identity=ZkIdentity("digest", USER, PASSWORD))
    session.start()
    try:
        assert session.protect(root) == 3  # the root, jobModels, 1
        assert session.protect(root) == 0  # done once
        with pytest.raises(NoAuthError):
            anonymous.get(f"{root}/jobModels/1")
        assert session.client.get(f"{root}/jobModels/1")[0] == b"{}"
    finally:
        session.stop()
    other = ZkSession(zookeeper.connect_string,
                      identity=ZkIdentity("digest", "someone-else", "pw"))
    other.start()
    try:
        with pytest.raises(ZkAclError, match="belongs to another identity"):
            other.protect(root)
    finally:
        other.stop()


def test_replicas_with_digest_auth_fail_over(
    zookeeper: ZooKeeperEnsemble, anonymous: KazooClient, tmp_path: Path,
) -> None:
    """Two replicas of one job, one identity: the leader killed, the other takes over (its
    election node and the job's tree are the identity's; nobody else reads them)."""
    auth = tmp_path / "zk.auth"
    auth.write_text(f"{USER}:{PASSWORD}\n")
    with replicas(tmp_path, zookeeper.connect_string, 2, "--zk-auth-file", str(auth),
                  "--input", "kafka.orders:4", "--zk-session-timeout-ms", "3000") as servers:
        leader = wait_leader(servers)
        job = servers[0].args[servers[0].args.index("--job") + 1]
        with pytest.raises(NoAuthError):
            anonymous.get_children(f"/coxswain/{job}")
        servers[index_of(leader)].kill()
        assert wait_leader(servers, not_=leader) != leader
