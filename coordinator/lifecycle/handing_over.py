"""Which processors a pending barrier still waits for that are alive and handing over
(pure): a barrier timeout drops only the others.

A processor that lost tasks stops them at its batch boundary and waits for their last
commit before it acks; on a starved machine its batch in flight alone can take a minute.
It reports that in its heartbeats (the stat ``handingOver``: the version it is handing
over for, the tasks, since when), so the leader extends the barrier for it, up to the
barrier's maximum, instead of dropping a live processor (which then loses its lease,
registers again and sends the job through more versions). A processor that stopped
heartbeating is dropped at the timeout as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.barrier import Barrier
from coordinator.membership import ProcessorLease

#: the heartbeat stat a processor reports while it hands tasks over
HANDING_OVER = "handingOver"


def handing_over(barrier: Barrier, leases: Mapping[str, ProcessorLease], now: float,
                 lease_ttl_s: float, heartbeat_window_s: float) -> dict[str, Any]:
    """The barrier's silent participants that heartbeated within ``heartbeat_window_s``
    and whose last heartbeat reports handing over for this version (or a later one):
    processor id -> its report."""
    out: dict[str, Any] = {}
    for pid in sorted(barrier.silent):
        lease = leases.get(pid)
        if lease is None:
            continue
        last_heartbeat = lease.expires_at - lease_ttl_s
        if now - last_heartbeat > heartbeat_window_s:
            continue
        report = lease.stats.get(HANDING_OVER)
        if not isinstance(report, Mapping):
            continue
        version = report.get("version")
        if isinstance(version, int) and not isinstance(version, bool) \
                and version >= barrier.version:
            out[pid] = dict(report)
    return out
