"""Benchmark of job model generation: time, balance, and moves vs the lower bound.

For 1k/10k/100k virtual tasks on 10/100/1000 processors, stateless and stateful, it times
`generate_job_model` (grouping + assignment) for four changes from a balanced start: one
processor lost, one added, elasticity factor doubled (4 -> 8), factor halved (16 -> 8); each
change ends with the row's number of tasks. It prints the median
time of several runs, the balance (max - min active tasks), and the tasks moved against the
lower bound on moves for that change.

Every change starts from a model whose barrier is done: the leader knows every task's last
location (the starting model's), as its locality map holds it, and passes it to the
generation (``--no-locality`` leaves it out, as figures before 2026-11-25 did: a factor
change looked up 100k new names and their 200k predecessors in it).

Stateful runs: every processor reports lag 0 for the tasks it holds (standby copies under
their active task's name), so the tasks of a lost processor may go anywhere, while a new
processor (no state yet) only gets warm-ups: its moves come in later probing rebalances
(KIP-441), and the table shows them as warm-ups.

Each change is generated as the leader does it: by a :class:`JobModelGenerator` that
generated the starting model and kept its indexes, incremental where the change allows
(column "path"); "full ms" times the full computation (``generate_job_model`` from a fresh
copy of the previous model, whose lineage it indexes first) for the same change. A row
"initial" generates from scratch (a new job: no locality), by a new generator, and "full
ms" there by ``generate_job_model``; the generator frees its intermediates in
``index_lineage``, the plain function as it returns. The leader indexes a model's lineage
once its barrier is done and it has been idle a while (``JobModelGenerator.index_lineage``),
off the way to the next publication; the bench does it after generating the starting
model and after each timed run, outside the clock.

Run: python -m bench.assignment [--quick] [--runs N] [--tasks N...] [--procs N...]
     [--standbys N] [--leader-heap] [--no-locality]

A generation leaves hundreds of thousands of new objects, and in a plain process the
garbage collector walks them right after (the next allocation collects the young
generation): the default times count that. ``--leader-heap`` times each generation as the
coordinator runs it, inside ``FrozenHeap.generating`` (collector paused, the new model
frozen before it resumes). Either way the previous run's model is freed before the clock
starts.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from grouping.assignment import AssignmentParams
from grouping.generation import GeneratedJobModel, generate_job_model
from grouping.groupers import GroupByPartition
from grouping.incremental import JobModelGenerator
from grouping.measures import balance, lower_bound_moves, moved_tasks
from grouping.model import JobModel, SystemStreamPartition
from grouping.task_names import parse_standby_task_name
from service.heap import FrozenHeap

BASE_FACTOR = 8
GROUPER = GroupByPartition()


def processors(n: int, extra: int = 0) -> dict[str, str]:
    return {f"proc-{i:05d}": f"host-{i:05d}" for i in range(n + extra)}


def inputs(tasks: int) -> list[SystemStreamPartition]:
    return [SystemStreamPartition("kafka", "events", p) for p in range(tasks // BASE_FACTOR)]


def lags_of(model: JobModel) -> dict[str, dict[str, int]]:
    """Lag 0 for every copy a processor holds, reported under the active task's name."""
    reports: dict[str, dict[str, int]] = {}
    for pid, container in model.containers.items():
        report = reports[pid] = {}
        for name in container.tasks:
            standby = parse_standby_task_name(name)
            report[standby[0] if standby else name] = 0
    return reports


def timed(fn: Callable[[], GeneratedJobModel], runs: int,
          scope: Callable[[], AbstractContextManager[object]] = nullcontext,
          published: Callable[[GeneratedJobModel], None] | None = None,
          ) -> tuple[float, GeneratedJobModel]:
    """The median seconds of ``runs`` calls of ``fn``, each inside ``scope()``;
    ``published`` runs on each result after the clock stops (what the leader does once a
    model is published)."""
    times = []
    result = None
    for _ in range(runs):
        # the previous run's model is freed before the clock starts: freeing 100k tasks
        # (30-50 ms) is not part of making the next model
        result = None
        start = time.perf_counter()
        with scope():
            result = fn()
        times.append(time.perf_counter() - start)
        if published is not None:
            with scope():
                published(result)
    assert result is not None
    return statistics.median(times), result


def scenario_rows(n_tasks: int, n_procs: int, stateful: bool, runs: int,
                  standbys: int = 0,
                  scope: Callable[[], AbstractContextManager[object]] = nullcontext,
                  locality: bool = True) -> list[str]:
    """One row per change; every change ends with ``n_tasks`` tasks (F = 8 afterwards)."""
    ssps = inputs(n_tasks)
    procs = processors(n_procs)
    params = AssignmentParams(num_standbys=standbys)
    lost = dict(procs)
    lost.pop(sorted(procs)[n_procs // 2])
    changes = {  # name: (factor before, processors after)
        "lost one": (BASE_FACTOR, lost),
        "added one": (BASE_FACTOR, processors(n_procs, 1)),
        "F doubled": (BASE_FACTOR // 2, procs),
        "F halved": (BASE_FACTOR * 2, procs),
    }
    rows = []
    for change, (factor_before, live) in changes.items():
        generator = JobModelGenerator()
        base = generator.generate(1, ssps, GROUPER, factor_before, procs, stateful=stateful,
                                  params=params).job_model
        generator.index_lineage(base)  # as the leader does between changes
        lags = lags_of(base) if stateful else None
        known = base.task_locations() if locality else None

        def run(base: JobModel = base, live: dict[str, str] = live,
                lags: dict[str, dict[str, int]] | None = lags,
                known: dict[str, str] | None = known,
                generator: JobModelGenerator = generator) -> GeneratedJobModel:
            # the leader's way: the generator kept the indexes of the model it made
            return generator.generate(2, ssps, GROUPER, BASE_FACTOR, live, previous=base,
                                      task_locality=known, task_lags=lags, stateful=stateful,
                                      params=params)

        def full(base: JobModel = base, live: dict[str, str] = live,
                 lags: dict[str, dict[str, int]] | None = lags,
                 known: dict[str, str] | None = known) -> GeneratedJobModel:
            # A fresh previous model each run: no index cached by an earlier run.
            previous = JobModel(base.version, base.config, base.containers)
            return generate_job_model(2, ssps, GROUPER, BASE_FACTOR, live, previous=previous,
                                      task_locality=known, task_lags=lags, stateful=stateful,
                                      params=params)

        def publish(generated: GeneratedJobModel,
                    generator: JobModelGenerator = generator) -> None:
            generator.index_lineage(generated.job_model)

        seconds, generated = timed(run, runs, scope, publish)
        path = generator.last_path
        full_seconds, reference = timed(full, runs, scope)
        assert reference.job_model == generated.job_model, "incremental != full"
        rows.append(_row(base, generated, live, stateful, change, seconds, path,
                         full_seconds, params))

    # a new job, as its first leader generates it (a generator with nothing to go on)
    first = JobModelGenerator()

    def initial() -> GeneratedJobModel:
        return first.generate(1, ssps, GROUPER, BASE_FACTOR, procs, stateful=stateful,
                              params=params)

    def initial_full() -> GeneratedJobModel:
        return generate_job_model(1, ssps, GROUPER, BASE_FACTOR, procs, stateful=stateful,
                                  params=params)

    def publish_first(generated: GeneratedJobModel) -> None:
        first.index_lineage(generated.job_model)

    seconds, generated = timed(initial, runs, scope, publish_first)
    full_seconds, reference = timed(initial_full, runs, scope)
    assert reference.job_model == generated.job_model, "generator != generate_job_model"
    rows.append(_row(None, generated, procs, stateful, "initial", seconds, first.last_path,
                     full_seconds, params))
    return rows


def _row(base: JobModel | None, generated: GeneratedJobModel, live: dict[str, str],
         stateful: bool, change: str, seconds: float, path: str, full_seconds: float,
         params: AssignmentParams) -> str:
    model = generated.job_model
    tasks = list(model.active_tasks().values())
    if base is None:
        moved, bound = 0, 0
    else:
        moved = moved_tasks(base, model, BASE_FACTOR)
        bound = lower_bound_moves(base, tasks, list(live), params.balance_factor, BASE_FACTOR)
    warmups = len(generated.assignment.warmups)
    ratio = "-" if bound == 0 else f"{moved / bound:.3f}"
    return (f"| {len(tasks):>7} | {len(live):>5} | {'stateful' if stateful else 'stateless':9} "
            f"| {change:9} | {seconds * 1000:9.1f} | {path:11} | {full_seconds * 1000:7.1f} "
            f"| {balance(model):>3} | {moved:>6} | {bound:>6} | {ratio:>5} | {warmups:>3} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only 1k and 10k tasks")
    parser.add_argument("--runs", type=int, default=5, help="runs per measurement (median)")
    parser.add_argument("--tasks", type=int, nargs="+", help="task counts (default: all)")
    parser.add_argument("--procs", type=int, nargs="+", default=[10, 100, 1000],
                        help="processor counts")
    parser.add_argument("--standbys", type=int, default=0,
                        help="num_standbys; > 0 runs the stateful rows only")
    parser.add_argument("--leader-heap", action="store_true",
                        help="each generation inside the leader's collector scope "
                             "(service.heap.FrozenHeap.generating): the collector paused "
                             "and the new model frozen before it resumes")
    parser.add_argument("--no-locality", action="store_true",
                        help="changes without the tasks' last locations (the leader has "
                             "them once a model's barrier is done)")
    args = parser.parse_args()
    scope = FrozenHeap().generating if args.leader_heap else nullcontext
    sizes = args.tasks or ([1_000, 10_000] if args.quick else [1_000, 10_000, 100_000])
    kinds = (True,) if args.standbys > 0 else (False, True)
    print("| tasks   | procs | kind      | change    | median ms | path        | full ms "
          "| bal | moved  | bound  | ratio | wu  |")
    print("|---------|-------|-----------|-----------|-----------|-------------|---------"
          "|-----|--------|--------|-------|-----|")
    for n_tasks in sizes:
        for n_procs in args.procs:
            for stateful in kinds:
                for row in scenario_rows(n_tasks, n_procs, stateful, args.runs, args.standbys,
                                         scope, not args.no_locality):
                    print(row, flush=True)


if __name__ == "__main__":
    main()
