"""Leader election on ZooKeeper, with an epoch that fences every publication.

The classic recipe, written out rather than taken from kazoo's ``Election`` (whose lock
can hang after a reconnect and cannot be told that the session is gone): each replica
creates an ephemeral sequential contender ``{root}/leader/election/n_…`` holding its
replica id; the lowest sequence leads; the others watch the contender just below theirs.

On winning, the leader bumps ``leader/epoch`` (its znode version is the epoch) and passes
``Fence(leader, epoch, epoch)`` with each job-model publication, which the store checks in
the same ZooKeeper transaction: a deposed, paused or disconnected leader's publication is
refused. On SUSPENDED (connection lost, session maybe alive) the leader stops acting at
once; when the connection returns within the session, it resumes; on LOST (session
expired: its contender node is gone) it enters the election again with a new node.
State changes are reported through ``on_change(is_leader)`` from a worker thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import KazooState

from coordinator.store.metadata import Fence, MetadataStore

log = logging.getLogger("coxswain.leader")

LEADER = "leader"
EPOCH_KEY = "epoch"


class ZkLeader:
    """A :class:`~coordinator.leadership.role.LeaderRole` elected through ZooKeeper."""

    def __init__(
        self,
        client: KazooClient,
        store: MetadataStore,
        election_path: str,
        replica_id: str,
        on_change: Callable[[bool], None] = lambda _: None,
    ) -> None:
        self._zk = client
        self._store = store
        self._path = election_path
        self._replica_id = replica_id
        self._on_change = on_change
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._node: str | None = None
        self._leading = False  # won the election (our node is the lowest)
        self._suspended = False
        self._epoch = 0
        self._leader_id: str | None = None
        self._thread: threading.Thread | None = None

    # -- LeaderRole

    @property
    def replica_id(self) -> str:
        """This replica's id."""
        return self._replica_id

    def is_leader(self) -> bool:
        """True while this replica won the election and its connection is up."""
        with self._lock:
            return self._leading and not self._suspended and not self._stopped.is_set()

    def leader_id(self) -> str | None:
        """The replica id held by the lowest contender, as last seen."""
        return self._leader_id

    @property
    def epoch(self) -> int:
        """The epoch this replica won with (0 before it ever led)."""
        return self._epoch

    def fence(self) -> Fence | None:
        """What a publication must check: the epoch this replica won with."""
        return Fence(LEADER, EPOCH_KEY, self._epoch) if self._epoch else None

    def serves_commits(self) -> bool:
        """True: every replica judges commits from the store's shared view."""
        return True

    # -- lifecycle

    def start(self) -> None:
        """Join the election (in a background thread)."""
        self._zk.add_listener(self._on_state)
        self._thread = threading.Thread(target=self._run, name="coxswain-election",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Leave the election (deletes our contender node if the session is alive)."""
        self._stopped.set()
        self._wake.set()
        self._zk.remove_listener(self._on_state)
        self._set_leading(False)
        node = self._node
        if node is not None and self._zk.connected:
            with contextlib.suppress(KazooException):
                self._zk.delete(node)
        if self._thread is not None:
            self._thread.join(5)

    # -- internals

    def _on_state(self, state: str) -> None:
        # kazoo's connection thread: never block here.
        if state == KazooState.SUSPENDED:
            with self._lock:
                self._suspended = True
            if self._leading:
                log.warning("ZooKeeper connection suspended: stop acting as leader")
                self._notify(False)
        elif state == KazooState.LOST:
            with self._lock:
                self._suspended = True
                self._node = None
            log.warning("ZooKeeper session lost: leadership gone, entering the election again")
            self._set_leading(False)
        else:  # CONNECTED
            with self._lock:
                self._suspended = False
            if self._leading:
                log.info("ZooKeeper connection back within the session: leading again")
                self._notify(True)
        self._wake.set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.clear()
            try:
                self._step()
            except KazooException as e:
                log.debug("election step failed (%s); retrying", e)
                self._wake.wait(0.5)
                continue
            self._wake.wait(1.0)

    def _step(self) -> None:
        """One look at the election: create our node if needed, lead or watch."""
        if not self._zk.connected:
            return
        if self._node is None:
            self._zk.ensure_path(self._path)
            self._node = self._zk.create(f"{self._path}/n_", self._replica_id.encode(),
                                         ephemeral=True, sequence=True)
        contenders = sorted(self._zk.get_children(self._path))
        mine = self._node.rsplit("/", 1)[1]
        if mine not in contenders:  # our node vanished (session replaced): start over
            self._node = None
            self._set_leading(False)
            self._wake.set()
            return
        lowest = contenders[0]
        try:
            leader_data, _ = self._zk.get(f"{self._path}/{lowest}")
            self._leader_id = leader_data.decode()
        except NoNodeError:
            self._wake.set()
            return
        if lowest == mine:
            if not self._leading:
                self._epoch = self._store.put(LEADER, EPOCH_KEY, self._replica_id.encode())
                log.info("elected leader with epoch %d", self._epoch)
                self._set_leading(True)
            return
        self._set_leading(False)
        below = contenders[contenders.index(mine) - 1]
        # wake when the contender just below us goes (or the leader changes)
        if self._zk.exists(f"{self._path}/{below}", watch=lambda _e: self._wake.set()) is None:
            self._wake.set()

    def _set_leading(self, leading: bool) -> None:
        with self._lock:
            changed = leading != self._leading
            self._leading = leading
        if changed:
            self._notify(leading and not self._suspended)

    def _notify(self, leading: bool) -> None:
        try:
            self._on_change(leading)
        except Exception:
            log.exception("leadership change callback failed")
