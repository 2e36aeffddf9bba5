"""Which processors a version's participants fence before they ack it (exactly-once
output, docs/architecture.md "Exactly-once output").

A processor that ran tasks under a version whose barrier completed may still hold an
open Kafka transaction, or write one, until it is fenced. Every processor of the newest
completed version (the active one) or of the latest published one (it may complete while
this version is generated) that is not in the new version is listed: its participants
fence each listed processor's transactional id before acking, so by the time the new
version's barrier is done, and anyone starts the tasks such a processor had, it can
commit nothing more. Processors removed earlier were listed in a version that completed,
hence fenced then, unless that version had no processors at all (every lease expired:
its barrier is done at once, by no one): its list is carried into the next version,
whose participants fence them before anyone runs their tasks (a chaos run found the
gap: a worker whose lease expired committed its last transaction after the next owner,
never told to fence it, had started the tasks: 5 records twice). A processor in the new
version is never listed: one that registered again fenced its own earlier incarnation
(the same transactional id) as it started.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from grouping.model import JobModel

#: the job model config key of the list (a sorted list of processor ids; absent if empty)
FENCED = "fencedProcessors"


def fenced_processors(active: JobModel | None, latest: JobModel | None,
                      participants: Iterable[str]) -> list[str]:
    """Processors of ``active`` or ``latest`` that are not ``participants``, and those
    that an ``active`` or ``latest`` without processors listed (nobody there fenced
    them: their tasks' next owners must), sorted."""
    held: set[str] = set()
    for model in (active, latest):
        if model is None:
            continue
        held |= set(model.containers)
        if not model.containers:  # a barrier done with no participant fenced no one
            held |= set(model.config.get(FENCED) or ())
    return sorted(held - set(participants))


def without_fenced(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` without the list: a version whose assignment is unchanged is not
    published again only because the list changed (a completed barrier empties it)."""
    return {k: v for k, v in config.items() if k != FENCED}
