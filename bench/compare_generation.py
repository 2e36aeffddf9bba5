"""Job model generation, this checkout against another git revision, back to back.

This machine's speed drifts between runs, so an absolute figure from an earlier day says
little about a change; this times the same 100k-task scenarios with both revisions'
``grouping`` packages, alternating subprocesses, and prints the medians side by side.

Run: python -m bench.compare_generation REV [--rounds 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs inside the revision's checkout (its grouping package), with this checkout's bench
# scenario helpers copied in so old revisions need nothing new.
SCENARIOS = r'''
import statistics, time
from grouping.assignment import AssignmentParams
from grouping.generation import generate_job_model
from grouping.groupers import GroupByPartition
from grouping.model import JobModel, SystemStreamPartition

grouper, params = GroupByPartition(), AssignmentParams()
ssps = [SystemStreamPartition("kafka", "events", p) for p in range(100_000 // 8)]
procs = {f"proc-{i:05d}": f"host-{i:05d}" for i in range(1000)}
for name, before, stateful in (("stateful F doubled", 4, True),
                               ("stateless F halved", 16, False),
                               ("stateful F halved", 16, True)):
    base = generate_job_model(1, ssps, grouper, before, procs, stateful=stateful,
                              params=params).job_model
    lags = ({pid: {t.name: 0 for t in c.active_tasks} for pid, c in base.containers.items()}
            if stateful else None)
    times = []
    for _ in range(5):
        previous = JobModel(base.version, base.config, base.containers)
        start = time.perf_counter()
        generate_job_model(2, ssps, grouper, 8, procs, previous=previous, task_lags=lags,
                           stateful=stateful, params=params)
        times.append(time.perf_counter() - start)
    print(f"{name}\t{statistics.median(times):.3f}", flush=True)
'''


def timings(checkout: Path) -> dict[str, float]:
    """Median seconds per scenario with ``checkout``'s grouping package."""
    out = subprocess.run([sys.executable, "-c", SCENARIOS], cwd=checkout, check=True,
                         capture_output=True, text=True, env={"PYTHONPATH": str(checkout)})
    return {name: float(s) for name, s in (line.split("\t") for line in out.stdout.splitlines())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revision", help="git revision to compare with, e.g. HEAD~3")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "other"
        subprocess.run(["git", "worktree", "add", "--detach", str(other), args.revision],
                       cwd=ROOT, check=True, capture_output=True)
        try:
            print(f"| scenario (100k tasks, 1000 processors) | this checkout s | "
                  f"{args.revision} s |")
            print("|---|---|---|")
            for _ in range(args.rounds):
                here, there = timings(ROOT), timings(other)
                for name in here:
                    print(f"| {name} | {here[name]:.3f} | {there[name]:.3f} |", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT,
                           check=False, capture_output=True)


if __name__ == "__main__":
    main()
