"""The end-to-end scenarios on a starved machine (issue #49): ``stress-ng --cpu N`` (by
default 8, four times this 2-core machine's cores) runs beside the suite's end-to-end
tests of the changes users make (rescale 1 -> 4 -> 1, a join with a graceful leave and a
kill -9, stateful elasticity, a Kinesis split and merge with a kill, a hand-over that
outlasts the barrier timeout), each with its usual verdicts (nothing lost, per-key
order, count == seq + 1). Beyond them, the logs the tests leave are read for what
starvation used to cause: a processor dropped by a barrier timeout while it heartbeated
(its worker then logs ``lease lost``), a worker that exited on its own, a query that died
and was started again.

    python -m bench.loaded_e2e [--hogs 8] [NODEID ...]

Prints one line per test (verdict, seconds, what its logs show) and the load average
seen while it ran; the figures go to bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

E2E = "tests/worker/"
SCENARIOS = (
    E2E + "test_end_to_end.py::"
    "test_scaling_while_producing_loses_nothing_and_keeps_key_order",
    E2E + "test_end_to_end.py::test_join_graceful_leave_and_kill_9",
    E2E + "test_stateful_end_to_end.py::"
    "test_state_follows_the_elasticity_factor_while_the_job_runs[1]",
    E2E + "test_kinesis_end_to_end.py::"
    "test_split_merge_split_with_a_kill_keeps_every_keys_order",
    E2E + "test_slow_handover.py::"
    "test_a_worker_handing_over_past_the_barrier_timeout_is_waited_for_not_dropped",
)

#: what the logs say, by what it means
SIGNS = {
    "dropped": re.compile(r"dropping silent processors: (\S.*)"),
    "extended": re.compile(r"barrier of version \d+ extended"),
    "lease lost": re.compile(r"lease lost"),
    "query restarts": re.compile(r"the query died, not in the app's code"),
    "exits": re.compile(r"coxswain worker: (?!stopped)"),
}


@dataclass
class Outcome:
    """One test's verdict, duration and what its logs show."""

    nodeid: str
    verdict: str = "not run"
    seconds: float = 0.0
    signs: dict[str, int] = field(default_factory=dict)


def loads() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def read_signs(folder: Path) -> dict[str, int]:
    """Counts of each sign over the worker and coordinator logs under ``folder``."""
    counts = dict.fromkeys(SIGNS, 0)
    for log in folder.rglob("*.log"):
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        for name, pattern in SIGNS.items():
            counts[name] += len(pattern.findall(text))
    return counts


def run_one(nodeid: str, root: Path) -> Outcome:
    """Run ``nodeid`` with pytest (its own folder, its services started by the suite's
    fixtures), its verdict from the JUnit report."""
    name = re.sub(r"[^A-Za-z0-9_]+", "_", nodeid.rsplit("::", maxsplit=1)[-1])[:60]
    folder = root / name
    report = root / f"{name}.xml"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--basetemp", str(folder), f"--junitxml={report}", nodeid],
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    outcome = Outcome(nodeid, seconds=time.monotonic() - started, signs=read_signs(folder))
    if report.exists():
        case = ET.parse(report).getroot().find(".//testcase")
        if case is not None:
            failed = case.find("failure") is not None or case.find("error") is not None
            outcome.verdict = "FAILED" if failed else (
                "skipped" if case.find("skipped") is not None else "passed")
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loaded_e2e")
    parser.add_argument("--hogs", type=int, default=8, help="stress-ng --cpu N (8)")
    parser.add_argument("--keep", action="store_true", help="keep the tests' folders")
    parser.add_argument("nodeids", nargs="*", default=list(SCENARIOS))
    args = parser.parse_args(argv)
    stress = shutil.which("stress-ng")
    if stress is None:
        print("stress-ng is not installed (Debian: apt install stress-ng)", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="loaded-e2e-"))
    hogs = subprocess.Popen([stress, "--cpu", str(args.hogs), "--timeout", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    outcomes = []
    try:
        time.sleep(5)  # the hogs at full load before the first test starts
        for nodeid in args.nodeids:
            before = loads()
            outcome = run_one(nodeid, root)
            outcomes.append(outcome)
            signs = ", ".join(f"{k} {v}" for k, v in outcome.signs.items() if v)
            print(f"{outcome.verdict:7} {outcome.seconds:6.0f} s  load {before} -> "
                  f"{loads()}  {nodeid.split('::')[-1]}  [{signs or 'nothing'}]",
                  flush=True)
    finally:
        os.killpg(hogs.pid, 15)
        hogs.wait(30)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    failed = [o for o in outcomes if o.verdict != "passed"]
    print(f"{len(outcomes) - len(failed)} of {len(outcomes)} passed beside "
          f"stress-ng --cpu {args.hogs}" + (f"; folders kept in {root}" if args.keep else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
