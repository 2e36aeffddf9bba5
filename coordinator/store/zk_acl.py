"""Who may read and change a job's znodes: ZooKeeper authentication and ACLs.

Without auth every znode the coordinator creates is ``world:anyone`` with every
permission, so any client of a shared ensemble could read a job's models or change its
leases and barriers. With an identity (``--zk-auth-file USER:PASSWORD``; the ``digest``
scheme, or ``sasl`` with DIGEST-MD5 through pure-sasl against a server with a SASL
authentication provider) the coordinator's kazoo client authenticates as it and creates
everything under the job's root readable and writable by that identity only (kazoo's
``default_acl``). The root's
ancestors (``/coxswain``, a chroot's parents) are shared by every job of the ensemble:
they are made readable and creatable by anyone (another job's coordinator creates its own
root beside ours there), and never changed when they exist.

A tree made before auth was turned on keeps its open ACLs until :func:`protect` sets the
identity's on each of its znodes, which the coordinator does at every start (a no-op once
done). A tree owned by another identity is refused with a message: its data cannot be
read, and taking it over is an operator's decision (``setAcl`` as its owner, or a new job).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NodeExistsError, NoNodeError
from kazoo.security import ACL, ANYONE_ID_UNSAFE, Id, Permissions, make_digest_acl

log = logging.getLogger("coxswain.store")


class ZkAclError(RuntimeError):
    """The job's znodes cannot be protected (owned by another identity)."""


SCHEMES = ("digest", "sasl")


@dataclass(frozen=True, slots=True)
class ZkIdentity:
    """Who the coordinator is to ZooKeeper: ``scheme`` ``digest`` or ``sasl``
    (DIGEST-MD5), a user and a password."""

    scheme: str
    user: str
    password: str

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ValueError(f"ZooKeeper auth scheme {self.scheme!r}: digest or sasl")

    def __repr__(self) -> str:
        return f"ZkIdentity({self.scheme}:{self.user})"

    def client_options(self) -> dict[str, Any]:
        """kazoo client keyword arguments: the credentials, and the ACL of every znode
        it creates."""
        if self.scheme == "sasl":
            auth: dict[str, Any] = {"sasl_options": {
                "mechanism": "DIGEST-MD5", "username": self.user, "password": self.password}}
        else:
            auth = {"auth_data": [("digest", f"{self.user}:{self.password}")]}
        return {**auth, "default_acl": self.owner_acl()}

    def _all(self) -> ACL:
        if self.scheme == "sasl":
            return ACL(Permissions.ALL, Id("sasl", self.user))
        return make_digest_acl(self.user, self.password, all=True)

    def owner_acl(self) -> list[ACL]:
        """Every permission for this identity, none for anyone else."""
        return [self._all()]

    def shared_parent_acl(self) -> list[ACL]:
        """A parent shared by jobs: anyone lists and creates children; the identity that
        made it may also change and delete it."""
        return [ACL(Permissions.READ | Permissions.CREATE, ANYONE_ID_UNSAFE), self._all()]


def ancestors(path: str) -> list[str]:
    """The znodes above ``path``, the topmost first (``/a/b/c`` -> ``/a``, ``/a/b``)."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def protect(client: KazooClient, root: str, identity: ZkIdentity) -> int:
    """Make ``root`` and every znode under it the identity's alone, creating ``root``
    (and its shared ancestors) if missing; how many existing znodes had their ACL set."""
    mine = identity.owner_acl()
    user = identity.user
    for parent in ancestors(root):
        with suppress(NodeExistsError):
            client.create(parent, b"", acl=identity.shared_parent_acl())
    try:
        client.create(root, b"", acl=mine)
        return 0  # new: nothing under it yet
    except NodeExistsError:
        pass
    changed = 0
    todo: list[str] = [root]
    while todo:
        path = todo.pop()
        try:
            acls, _ = client.get_acls(path)
            if not _same(acls, mine):
                client.set_acls(path, mine)
                changed += 1
            todo.extend(f"{path}/{child}" for child in client.get_children(path))
        except NoNodeError:
            continue  # deleted meanwhile (an ephemeral lease)
        except NoAuthError:
            raise ZkAclError(
                f"ZooKeeper znode {path} belongs to another identity: this coordinator "
                f"({identity.scheme} user {user!r}) may not read or change it. Use that identity's "
                "credentials, have its owner set the ACL, or run the job under another "
                "--job name") from None
    if changed:
        log.warning("set the ACL of %d znodes under %s (made before ZooKeeper auth was "
                    "on) to %s user %r only", changed, root, identity.scheme, user)
    return changed


def _same(acls: Sequence[ACL], wanted: Sequence[ACL]) -> bool:
    def key(acl: ACL) -> tuple[int, str, str]:
        return acl.perms, acl.id.scheme, acl.id.id
    return sorted(map(key, acls)) == sorted(map(key, wanted))
