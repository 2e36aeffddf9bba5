"""What the logs say about a chaos run's lost records: the faults around them, and the
worker and coordinator log lines about their task (handovers, restores, each batch's
ranges, starts, cuts and commit) between the record before the loss and the one after.

A loss seen once in a hundred runs must be explainable from the failed run's output
alone (CI keeps no files): this is that output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.chaos.config import FaultCost

#: log lines about a task's ownership (kept within the window whatever task they name)
LIFECYCLE = ("handing over", "registered as", "lease", "fenced", "exited", "cut short")
MOST_LINES = 80
WIDTH = 400
_STAMP = re.compile(r"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),(\d{3})")


def faults_timeline(costs: Sequence[FaultCost], since: float) -> list[str]:
    """Each fault: when (seconds from ``since``), what, how long, whom."""
    return [f"  t+{c.at - since:6.1f}s {c.kind} for {c.seconds:.1f}s"
            + (f" (pids {sorted(c.victim_pids)})" if c.victim_pids else "")
            for c in sorted(costs, key=lambda c: c.at)]


def stamp(line: str) -> float | None:
    """A log line's time (local wall clock, as the workers log it), or None."""
    m = _STAMP.search(line)
    if m is None:
        return None
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() \
        + int(m.group(2)) / 1000


def about(lines: Iterable[str], task: str, start: float, end: float) -> list[str]:
    """The lines naming ``task`` or a change of ownership, stamped within [start, end]."""
    out = []
    for line in lines:
        at = stamp(line)
        if at is None or not start <= at <= end:
            continue
        if task in line or any(word in line for word in LIFECYCLE):
            out.append(line.rstrip()[-WIDTH:])
    return out


def trace_lost(root: Path, lost_around: Sequence[tuple[dict[str, Any] | None,
                                                       dict[str, Any] | None]],
               costs: Sequence[FaultCost], since: float) -> list[str]:
    """For the first lost record: the faults, then the log lines of every worker (and
    coordinator replica) about its task, from 2 s before the output before it to the
    output after it, in time order."""
    if not lost_around:
        return []
    before, after = lost_around[0]
    known = [r for r in (before, after) if r is not None]
    if not known:
        return []
    task = str((after or before or {}).get("task"))
    start = min(float(r["at"]) for r in known) - 2.0
    end = max(float(r["at"]) for r in known) + 0.5
    found: list[tuple[float, str]] = []
    for log in sorted(root.glob("*.log")) + sorted(root.glob("r*/server-*.log")):
        name = log.stem if log.parent == root else log.parent.name
        try:
            text = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in about(text, task, start, end):
            found.append((stamp(line) or 0.0, f"  {name}: {line}"))
    found.sort(key=lambda f: f[0])
    lines = [f"trace of {task} from t+{start - since:.1f}s to t+{end - since:.1f}s "
             f"(faults from the start of the run):", *faults_timeline(costs, since)]
    if len(found) > MOST_LINES:  # the lines nearest the loss: the window's end
        lines.append(f"  ({len(found) - MOST_LINES} earlier lines left out)")
        found = found[-MOST_LINES:]
    return lines + [text for _, text in found]


#: what a worker logs when its reading slipped past a task's start (``BatchRunner.
#: _guarded``: healed, but a bug) and when Spark dropped a cut report from the
#: accumulator (healed by the report files: Spark's, not ours)
SLIPPED = "from past where"
DROPPED = "cut reports of the accumulator"


def alarms(root: Path) -> tuple[list[str], list[str]]:
    """The workers' lines saying their reading slipped, and those saying Spark dropped a
    cut report, from every worker log under ``root``."""
    slipped: list[str] = []
    dropped: list[str] = []
    for log in sorted(root.glob("w*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if SLIPPED in line:
                slipped.append(f"  {log.stem}: {line.strip()[-WIDTH:]}")
            elif DROPPED in line:
                dropped.append(f"  {log.stem}: {line.strip()[-WIDTH:]}")
    return slipped, dropped
