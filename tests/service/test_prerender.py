"""The leader renders each version's container JSON once, reusing unchanged containers'."""

from __future__ import annotations

from grouping.generation import generate_job_model
from grouping.groupers import GroupByPartition
from grouping.incremental import JobModelGenerator
from grouping.model import SSP
from service.routes.jobmodel import Prerenderer, prerender

INPUTS = [SSP("kafka", "orders", p) for p in range(40)]


def test_a_new_version_reuses_the_json_of_the_containers_it_shares() -> None:
    procs = {f"p{i:02d}": f"h{i}" for i in range(20)}
    generator = JobModelGenerator()
    first = generator.generate(1, INPUTS, GroupByPartition(), 2, procs).job_model
    live = dict(procs)
    live.pop("p05")
    second = generator.generate(2, INPUTS, GroupByPartition(), 2, live,
                                previous=first).job_model
    render = Prerenderer()
    one, two = render(first), render(second)
    shared = [pid for pid, c in second.containers.items() if c is first.containers[pid]]
    assert shared and len(shared) < len(second.containers)
    for pid in shared:
        assert two.by_processor[pid] is one.by_processor[pid]  # not rendered again
    # exactly what rendering from nothing gives
    fresh = generate_job_model(2, INPUTS, GroupByPartition(), 2, live, previous=first).job_model
    assert fresh == second
    assert prerender(fresh).by_processor == two.by_processor
    assert prerender(fresh).everything == two.everything
    again = render(second)  # memoised on the model: not rendered or joined again
    assert again.by_processor is two.by_processor and again.everything is two.everything
