"""A worker's backlog per task, for its heartbeats (the autosizer's and the lag-aware
assignment's input) and its progress lines (pure).

Kafka: the source reports every partition's latest stable offset in the query's
progress; a task is behind by its partition's end minus the last commit's end (each key
bucket of a partition counts the whole partition: which keys are behind is unknown).
Kinesis: the source reports each shard's estimated records behind (from
``MillisBehindLatest``) and the milliseconds behind; a key bucket gets its share of the
records (keys spread evenly) and its shard's milliseconds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from worker.plan import QueryPlan


def latest_offsets(progress: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The source's latest offsets from a query progress (its JSON, or its text as
    PySpark gives it for some sources); None without a source."""
    if not progress or not progress.get("sources"):
        return None
    latest = progress["sources"][0].get("latestOffset") or {}
    if isinstance(latest, str):
        latest = json.loads(latest) if latest != "null" else {}
    return dict(latest)


def task_backlog(plan: QueryPlan, latest: Mapping[str, Any],
                 committed: Mapping[tuple[str, int], int]
                 ) -> tuple[dict[str, dict[str, int]], int | None]:
    """The heartbeat stats (``consumerLag`` per task; Kinesis also ``consumerLagMs``)
    and, for Kafka, the records behind over every partition (None for Kinesis)."""
    if plan.system == "kinesis":
        return ({"consumerLag": kinesis_backlog(plan, latest, "recordsBehind"),
                 "consumerLagMs": kinesis_backlog(plan, latest, "millisBehindLatest")},
                None)
    lag: dict[str, int] = {}
    behind: dict[tuple[str, int], int] = {}
    for s in plan.starts:
        end = latest.get(f"{s.topic}/{s.partition}")
        done = committed.get((s.topic, s.partition))
        if end is not None and done is not None:
            lag[s.task] = max(lag.get(s.task, 0), int(end) - done)
            behind[(s.topic, s.partition)] = max(0, int(end) - done)
    return {"consumerLag": lag}, sum(behind.values())


def kinesis_backlog(plan: QueryPlan, latest: Mapping[str, Any], key: str) -> dict[str, int]:
    """Per task: a key bucket's share of its shards' estimated records behind (keys
    spread evenly), or the milliseconds its furthest-behind shard is."""
    behind: dict[str, int] = {}
    for s in plan.starts:
        found = (latest.get(str(s.partition)) or {}).get(key)
        if found is None:
            continue
        if key == "recordsBehind":
            share = int(found) // plan.factor if s.key_bucket >= 0 else int(found)
            behind[s.task] = behind.get(s.task, 0) + share
        else:
            behind[s.task] = max(behind.get(s.task, 0), int(found))
    return behind
