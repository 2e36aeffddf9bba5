"""An exactly-once commit (#28, docs/architecture.md "Exactly-once output"): a batch's
output and its checkpoint record in one Kafka transaction, the commit point, then the
checkpoint posted to the coordinator."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from worker.client import CoordinatorClient, CoordinatorError, Fenced, LeaseLost
from worker.output.transactions import Fenced as TransactionFenced
from worker.output.transactions import TransactionalOutput

log = logging.getLogger("coxswain.worker")


class TransactionalCommit:
    """Commits of one worker's exactly-once output, in order (the async committer's
    thread)."""

    def __init__(self, transactions: TransactionalOutput, client: CoordinatorClient,
                 processor_id: Callable[[], str], lease_over: threading.Event) -> None:
        self._transactions = transactions
        self._client = client
        self._pid = processor_id
        self._over = lease_over  # set when a commit is fenced or finds the lease lost
        self.committed = 0  # transactions committed (for the test hook)

    def __call__(self, version: int, cps: dict[str, Any], output: tuple[Any, ...]) -> int:
        """The commit's output and checkpoint record in one Kafka transaction (the commit
        point), then the checkpoint posted. An aborted transaction fails the commit
        (retried with its output); once committed, the post is retried until the
        coordinator takes it or refuses it: no other output is written before (the log
        then holds at most one record the coordinator lacks, which whoever fences this
        processor recovers)."""
        if self._over.is_set():
            # the lease is known lost: another processor may run these tasks already
            # (its fencing of this one may have come before this write, or never, if
            # no one was told to): the output is not committed; the next owner
            # processes these records from the last checkpoint
            raise LeaseLost(404, "unknown_processor", "the lease was lost before this "
                                 "commit's transaction: not written")
        try:
            self._transactions.write(_rows(output), version, cps)
        except TransactionFenced as e:  # another incarnation or a participant fenced us
            raise Fenced(409, "fenced", f"transactional id "
                                        f"{self._transactions.transactional_id} "
                                        f"fenced: {e}") from e
        self.committed += 1
        _exit_after_transaction_for_tests(self.committed)
        delay = 0.2
        while True:
            try:
                return self._client.commit(self._pid(), version, cps)
            except CoordinatorError:
                raise  # refused: this processor's lease is over
            except Exception as e:  # the coordinator unreachable: it must learn this one
                log.warning("checkpoint of a committed transaction not posted (%s: %s); "
                            "trying again in %.1fs", type(e).__name__, str(e)[:200], delay)
                time.sleep(delay)
                delay = min(5.0, delay * 2)


def _rows(tables: tuple[Any, ...]) -> Iterator[tuple[bytes | None, bytes | None]]:
    """The (key, value) rows of a commit's output (Arrow tables, oldest first)."""
    for table in tables:
        yield from zip(table.column("key").to_pylist(), table.column("value").to_pylist(),
                       strict=True)


def _exit_after_transaction_for_tests(committed: int) -> None:
    """A test hook (``COXSWAIN_TEST_EXIT_AFTER_TRANSACTIONS=N``): the process dies right
    after its N-th committed transaction, before the checkpoint is posted, as a kill -9
    between the two would leave it."""
    wanted = os.environ.get("COXSWAIN_TEST_EXIT_AFTER_TRANSACTIONS")
    if wanted and committed >= int(wanted):
        log.error("test hook: exiting after transaction %d, before its checkpoint is "
                  "posted", committed)
        os._exit(137)
