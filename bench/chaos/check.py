"""The independent reader's verdict on a chaos run's output (shares nothing with the
workers): nothing lost, per-key order, duplicates only from the workers a fault hit,
every count exact (stateful), and what each fault cost."""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from bench.chaos.config import ChaosReport, FaultCost

COST_WINDOW_S = 60.0  # a fault's output stop is looked for this long after it ended


def check(records: list[dict[str, Any]], produced: dict[str, list[int]], excused: set[int],
          report: ChaosReport, stateful: bool = False) -> None:
    """Fill ``report``: ``produced`` is per key the seqs of its records in the input
    topic, in order (read back: a record the producer failed to deliver is not the job's
    to process); ``excused`` are the worker processes (pids) a fault hit, whose
    uncommitted output may come again. A record's exact count is its place among its
    key's records in the input."""
    position = {(key, seq): i for key, seqs in produced.items() for i, seq in enumerate(seqs)}
    first: dict[tuple[str, int], dict[str, Any]] = {}
    per_key: dict[str, list[int]] = defaultdict(list)
    for r in records:
        k = (r["key"], r["seq"])
        if stateful and r.get("count") != position.get(k, -2) + 1:
            report.wrong_counts += 1
            report.examples.append(f"count {r.get('count')} of {k}: {r}")
        if k in first:
            report.duplicates += 1
            if first[k]["pid"] not in excused:
                report.unexplained_duplicates += 1
                report.examples.append(f"duplicate {k}: first by {first[k]}, again by {r}")
            continue
        first[k] = r
        per_key[r["key"]].append(r["seq"])
    report.output_records = len(records)
    report.produced = len(position)
    for key, inputs in produced.items():
        seqs = per_key.get(key, [])
        missing = sorted(set(inputs) - set(seqs))
        report.lost += len(missing)
        for seq in missing[:3]:  # where it went missing: the records around it
            around = [first.get((key, s)) for s in (seq - 1, seq + 1)]
            report.lost_around.append((around[0], around[1]))
            report.examples.insert(0, f"lost {(key, seq)}: before it {around[0]}, "
                                      f"after it {around[1]}")
        if seqs != sorted(seqs):
            report.order_violations += 1
            report.examples.append(f"order {key}: {seqs[:20]}")
    costs(records, first, report.costs)


def costs(records: list[dict[str, Any]], first: dict[tuple[str, int], dict[str, Any]],
          faults: Sequence[FaultCost]) -> None:
    """Per fault: the longest any input partition went without output from the fault's
    start to the next fault's (or ``COST_WINDOW_S`` after its end), and the duplicates
    whose first output came from its victims."""
    times: dict[int, list[float]] = defaultdict(list)
    for r in records:
        if "partition" in r and "at" in r:
            times[int(r["partition"])].append(float(r["at"]))
    batches = {p: sorted(set(ts)) for p, ts in times.items()}
    ordered = sorted(faults, key=lambda f: f.at)
    for i, fault in enumerate(ordered):
        end = fault.at + fault.seconds + COST_WINDOW_S
        if i + 1 < len(ordered):
            end = min(end, ordered[i + 1].at)
        worst = 0.0
        for ts in batches.values():
            j = max(0, bisect_left(ts, fault.at) - 1)  # the last output before it began
            while j + 1 < len(ts) and ts[j] < end:
                worst = max(worst, ts[j + 1] - max(ts[j], fault.at))
                j += 1
        fault.output_stopped_s = round(worst, 1)
        fault.duplicates = 0
    seen: set[tuple[str, int]] = set()
    for r in records:
        k = (r["key"], r["seq"])
        if k in seen:
            hit = _cause(ordered, first[k]["pid"], float(first[k].get("at", 0.0)))
            if hit is not None:
                hit.duplicates += 1
        seen.add(k)


def _cause(faults: Sequence[FaultCost], writer: int, at: float) -> FaultCost | None:
    """The fault behind a duplicate whose first output ``writer`` wrote at ``at``: one
    that hit the writer while it lasted (a partitioned worker writing on), else the next
    to hit it (a killed worker's last, uncommitted batch came before the kill)."""
    hits = [f for f in faults if writer in f.victim_pids]
    during = [f for f in hits if f.at <= at <= f.at + f.seconds]
    later = [f for f in hits if f.at > at]
    if during:
        return during[-1]
    if later:
        return later[0]
    return hits[-1] if hits else None
