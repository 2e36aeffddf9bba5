"""The leader's incremental generator gives exactly the full computation's job model."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from grouping.assignment import AssignmentParams
from grouping.generation import GeneratedJobModel, generate_job_model
from grouping.groupers import GroupByPartition
from grouping.incremental import JobModelGenerator
from grouping.model import SSP, JobModel, TaskMode

GROUPER = GroupByPartition()


def inputs(partitions: int) -> list[SSP]:
    return [SSP("kafka", "orders", p) for p in range(partitions)]


def assert_same(incremental: GeneratedJobModel, full: GeneratedJobModel) -> None:
    assert incremental.job_model == full.job_model
    assert dict(incremental.job_model.config) == dict(full.job_model.config)
    assert incremental.assignment.probing_rebalance_needed == \
        full.assignment.probing_rebalance_needed
    assert incremental.assignment.warmups == full.assignment.warmups
    assert dict(incremental.assignment.movements) == dict(full.assignment.movements)


def own_reports(model: JobModel, draw: Any, lag: Any) -> dict[str, dict[str, int]]:
    """Lags each processor reports for some of the active tasks it ran."""
    reports: dict[str, dict[str, int]] = {}
    for pid, container in model.containers.items():
        names = [n for n, t in container.tasks.items() if t.mode is TaskMode.ACTIVE]
        chosen = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
        if chosen:
            reports[pid] = {n: draw(lag) for n in chosen}
    return reports


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    return {
        "partitions": draw(st.integers(1, 6)),
        "factor": draw(st.sampled_from([1, 2, 4])),
        "processors": draw(st.integers(1, 6)),
        "stateful": draw(st.sampled_from(["none", "all", "some"])),
        "params": AssignmentParams(
            balance_factor=draw(st.integers(1, 2)),
            max_warmup_replicas=draw(st.integers(1, 2)),
            num_standbys=draw(st.sampled_from([0, 0, 0, 1]))),
        "steps": draw(st.lists(
            st.sampled_from(["join", "leave", "join+leave", "join2", "leave2", "lags",
                             "foreign lags", "same lags", "join+same lags",
                             "leave+same lags", "locality", "factor", "none"]),
            min_size=1, max_size=8)),
    }


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.data())
def test_incremental_generation_equals_full_generation(s: dict[str, Any], data: Any) -> None:
    draw = data.draw
    ssps = inputs(s["partitions"])
    factor = s["factor"]
    hosts = ["h1", "h2", "h3"]
    procs = {f"p{i}": hosts[i % 3] for i in range(s["processors"])}
    names = [f"Partition {p}" for p in range(s["partitions"])]
    stateful: bool | frozenset[str]
    if s["stateful"] == "some":
        stateful = frozenset(draw(st.lists(st.sampled_from(names), unique=True)))
    else:
        stateful = s["stateful"] == "all"
    generator = JobModelGenerator(max_change_share=1.0)  # several changes at once too
    args: dict[str, Any] = {"stateful": stateful, "params": s["params"],
                            "extra_config": {"k": "v"}}
    previous = generator.generate(1, ssps, GROUPER, factor, procs, **args).job_model
    next_id = len(procs)
    lag = st.sampled_from([0, 5, 10_000, 10_001, 50_000])
    last_lags: dict[str, dict[str, int]] = {}
    for version, step in enumerate(s["steps"], start=2):
        lags: dict[str, dict[str, int]] = {}
        locality: dict[str, str] = {}
        if "join" in step:
            for _ in range(2 if step == "join2" else 1):
                procs[f"p{next_id}"] = draw(st.sampled_from(hosts))
                next_id += 1
        if "leave" in step:
            for _ in range(2 if step == "leave2" else 1):
                if len(procs) > 1:
                    procs.pop(draw(st.sampled_from(sorted(procs))))
        if "same lags" in step:  # the very report objects of the last step (steady lags)
            lags = dict(last_lags)
        elif step == "lags" or (step != "foreign lags" and draw(st.booleans())):
            lags = own_reports(previous, draw, lag)
        if step == "foreign lags":
            lags = {pid: {name: draw(lag) for name in
                          draw(st.lists(st.sampled_from(sorted(previous.active_tasks())),
                                        unique=True, max_size=3))}
                    for pid in procs}
        if step == "locality":
            locality = {name: draw(st.sampled_from(hosts)) for name in
                        draw(st.lists(st.sampled_from(sorted(previous.active_tasks())),
                                      unique=True))}
        if step == "factor":
            factor = draw(st.sampled_from([1, 2, 4, 8]))
        call = {**args, "previous": previous, "task_lags": lags, "task_locality": locality}
        incremental = generator.generate(version, ssps, GROUPER, factor, dict(procs), **call)
        full = generate_job_model(version, ssps, GROUPER, factor, dict(procs), **call)
        assert_same(incremental, full)
        event(f"{s['stateful']} {step}: {generator.last_path}")
        if s["stateful"] == "none" and s["params"].num_standbys == 0 \
                and step in ("join", "leave", "none", "locality", "lags", "foreign lags"):
            assert generator.last_path == "incremental"
        previous = incremental.job_model
        last_lags = lags
        if draw(st.booleans(), label="indexed once published"):
            generator.index_lineage(previous)  # as the leader, before the next change


def balanced_start(n_procs: int = 40, partitions: int = 50, factor: int = 4,
                   stateful: bool = False) -> tuple[JobModelGenerator, JobModel, dict[str, str]]:
    procs = {f"p{i:02d}": f"h{i % 4}" for i in range(n_procs)}
    generator = JobModelGenerator()
    model = generator.generate(1, inputs(partitions), GROUPER, factor, procs,
                               stateful=stateful).job_model
    return generator, model, procs


def test_a_leave_and_a_join_take_the_incremental_path_and_share_unchanged_containers() -> None:
    generator, model, procs = balanced_start()
    assert generator.last_path == "full"
    live = dict(procs)
    live.pop("p03")
    left = generator.generate(2, inputs(50), GROUPER, 4, live, previous=model)
    assert generator.last_path == "incremental"
    assert left.job_model == generate_job_model(2, inputs(50), GROUPER, 4, live,
                                                previous=model).job_model
    unchanged = [pid for pid, c in left.job_model.containers.items()
                 if c.tasks == model.containers[pid].tasks]
    assert unchanged, "a leave of one processor of ten leaves some containers as they were"
    assert all(left.job_model.containers[pid] is model.containers[pid] for pid in unchanged)
    joined = generator.generate(3, inputs(50), GROUPER, 4, {**live, "p99": "h9"},
                                previous=left.job_model)
    assert generator.last_path == "incremental"
    assert len(joined.job_model.containers["p99"].tasks) == 200 // 40


def test_stateful_join_warms_up_the_newcomer_like_the_full_computation() -> None:
    generator, model, procs = balanced_start(stateful=True)
    lags = {pid: dict.fromkeys(c.tasks, 0) for pid, c in model.containers.items()}
    live = {**procs, "p99": "h9"}
    joined = generator.generate(2, inputs(50), GROUPER, 4, live, previous=model,
                                task_lags=lags, stateful=True)
    assert generator.last_path == "incremental"
    full = generate_job_model(2, inputs(50), GROUPER, 4, live, previous=model,
                              task_lags=lags, stateful=True)
    assert_same(joined, full)
    assert joined.assignment.probing_rebalance_needed
    assert len(joined.assignment.warmups) == 2  # max_warmup_replicas


def test_what_it_cannot_follow_takes_the_full_path() -> None:
    generator, model, procs = balanced_start()
    generator.generate(2, inputs(50), GROUPER, 8, procs, previous=model)  # factor change
    assert generator.last_path == "full"
    generator.generate(3, inputs(51), GROUPER, 4, procs, previous=model)  # new input
    assert generator.last_path == "full"
    restarted = JobModel(model.version, model.config, model.containers)  # not its own
    generator.generate(4, inputs(50), GROUPER, 4, procs, previous=restarted)
    assert generator.last_path == "full"


def test_a_changed_report_is_checked_again_though_its_container_is_the_same() -> None:
    generator, model, procs = balanced_start(stateful=True)
    lags = {pid: dict.fromkeys(c.tasks, 0) for pid, c in model.containers.items()}
    live = dict(procs)
    live.pop("p03")
    args: dict[str, Any] = {"previous": model, "stateful": True}
    generator.generate(2, inputs(50), GROUPER, 4, live, task_lags=lags, **args)
    assert generator.last_path == "incremental"  # every report checked, and remembered
    foreign = next(iter(model.containers["p05"].tasks))
    changed = {**lags, "p07": {**lags["p07"], foreign: 0}}  # p07 now reports p05's task
    again = generator.generate(2, inputs(50), GROUPER, 4, live, task_lags=changed, **args)
    assert generator.last_path == "full"
    assert_same(again, generate_job_model(2, inputs(50), GROUPER, 4, live,
                                          task_lags=changed, **args))
