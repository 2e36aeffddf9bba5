"""Job model JSON serde: API.md form round trips; Samza's hyphenated form is read."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grouping.errors import JobModelFormatError
from grouping.model import ContainerModel, JobModel, SystemStreamPartition, TaskMode, TaskModel
from grouping.serde import (
    ContainerJson,
    container_json_text,
    container_model_to_json,
    job_model_from_bytes,
    job_model_from_json,
    job_model_to_bytes,
    job_model_to_json,
    ssp_from_json,
    ssp_to_json,
)

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1,
                max_size=12)
ssps = st.builds(SystemStreamPartition, names, names, st.integers(0, 10_000),
                 st.integers(-1, 63))
# TaskModel's derived fields are not arguments: build it through its constructor.
task_models = st.tuples(names, st.lists(ssps, max_size=4).map(tuple), st.integers(-1, 1000),
                        st.sampled_from(TaskMode)).map(lambda a: TaskModel(*a))


@st.composite
def job_models(draw: st.DrawFn) -> JobModel:
    containers = []
    for pid in draw(st.lists(names, max_size=5, unique=True)):
        tasks = draw(st.lists(task_models, max_size=5, unique_by=lambda t: t.name))
        containers.append(ContainerModel.of(pid, draw(st.text(max_size=8)), tasks))
    config = draw(st.dictionaries(names, st.one_of(st.integers(), names, st.booleans()),
                                  max_size=4))
    return JobModel.of(draw(st.integers(0, 2**53)), config, containers)


@given(job_models())
def test_job_model_round_trips_through_json(model: JobModel) -> None:
    assert job_model_from_json(job_model_to_json(model)) == model
    assert job_model_from_bytes(job_model_to_bytes(model)) == model


@given(job_models())
def test_serialized_bytes_are_deterministic(model: JobModel) -> None:
    again = job_model_from_bytes(job_model_to_bytes(model))
    assert job_model_to_bytes(again) == job_model_to_bytes(model)


@given(job_models())
def test_a_containers_text_is_json_dumps_of_its_api_form(model: JobModel) -> None:
    # written out directly for speed: the bytes must stay those of json.dumps (the stored
    # copy's and every answer's), escapes of quotes, controls and non-ASCII included
    for container in model.containers.values():
        assert container_json_text(container) == json.dumps(
            container_model_to_json(container), separators=(",", ":"))


@given(ssps)
def test_ssp_round_trips(ssp: SystemStreamPartition) -> None:
    assert ssp_from_json(ssp_to_json(ssp)) == ssp


def test_api_form_matches_api_md() -> None:
    task = TaskModel("Partition 0_1_2", (SystemStreamPartition("kafka", "orders", 0, 1),), 0)
    model = JobModel.of(7, {"elasticityFactor": 2, "sspGrouper": "GroupByPartition"},
                        [ContainerModel.of("w1", "host-a", [task])])
    assert job_model_to_json(model) == {
        "version": 7,
        "config": {"elasticityFactor": 2, "sspGrouper": "GroupByPartition"},
        "containers": {"w1": {"processorId": "w1", "locationId": "host-a", "tasks": {
            "Partition 0_1_2": {
                "taskName": "Partition 0_1_2",
                "systemStreamPartitions": [
                    {"system": "kafka", "stream": "orders", "partition": 0, "keyBucket": 1}],
                "changelogPartition": 0,
                "taskMode": "Active"}}}},
    }
    assert model.elasticity_factor == 2


SAMZA_JOB_MODEL = """
{"config":{"job.name":"x"},
 "containers":{"0":{"processor-id":"0","tasks":{"Partition 0":{
    "task-name":"Partition 0",
    "system-stream-partitions":[{"system":"kafka","partition":0,"stream":"in","keyBucket":-1}],
    "changelog-partition":0,"task-mode":"Active"}}},
  "1":{"container-id":1,"tasks":{"Partition 1":{
    "task-name":"Partition 1",
    "system-stream-partitions":[{"system":"kafka","partition":1,"stream":"in"}],
    "changelog-partition":1}}}},
 "max-change-log-stream-partitions":2}
"""


def test_samza_hyphenated_job_model_is_read() -> None:
    model = job_model_from_bytes(SAMZA_JOB_MODEL.encode(), version=3)
    assert model.version == 3
    assert sorted(model.containers) == ["0", "1"]
    p0 = model.containers["0"].tasks["Partition 0"]
    assert p0.ssps == (SystemStreamPartition("kafka", "in", 0),)
    assert p0.mode is TaskMode.ACTIVE
    p1 = model.containers["1"].tasks["Partition 1"]
    assert p1.mode is TaskMode.ACTIVE  # missing task-mode means Active
    assert p1.ssps[0].key_bucket == -1  # 3-part SSP means the whole partition


@pytest.mark.parametrize("raw, message", [
    (b"{", "not valid JSON"),
    (b"[]", "expected a JSON object"),
    (b'{"containers": {}}', "missing field 'version'"),
    (b'{"version": -1, "containers": {}}', "must be >= 0"),
    (b'{"version": 1, "containers": {"a": {"processorId": "b"}}}', "does not match"),
    (b'{"version": 1, "containers": {"a": {"processorId": "a", "tasks": {"t": {'
     b'"taskName": "t", "systemStreamPartitions": [{"system": "k", "stream": "s", '
     b'"partition": -3}]}}}}}', "partition: must be >= 0"),
    (b'{"version": 1, "containers": {"a": {"processorId": "a", "tasks": {"t": {'
     b'"taskName": "t", "systemStreamPartitions": [], "taskMode": "Sleeping"}}}}}',
     "taskMode"),
])
def test_malformed_job_models_are_refused_with_a_reason(raw: bytes, message: str) -> None:
    with pytest.raises(JobModelFormatError, match=message):
        job_model_from_bytes(raw)


def test_version_in_body_must_agree_with_caller() -> None:
    body = json.dumps({"version": 2, "containers": {}}).encode()
    with pytest.raises(JobModelFormatError, match="body says 2"):
        job_model_from_bytes(body, version=3)


def test_stored_bytes_are_the_api_json_of_the_model_whoever_rendered_its_containers() -> None:
    model = JobModel.of(3, {"b": 1, "a": [2]}, [
        ContainerModel.of("w2", "h2", [TaskModel("T1", (SystemStreamPartition("k", "s", 1),), 1)]),
        ContainerModel.of("w1", "h1", [TaskModel("T0", (SystemStreamPartition("k", "s", 0),), 0)])])
    plain = job_model_to_bytes(model)
    assert json.loads(plain) == job_model_to_json(model)
    again = JobModel(model.version, model.config, model.containers)
    ContainerJson().of(again)  # rendered for the API first, then stored
    assert job_model_to_bytes(again) == plain
