"""SSP groupers with elasticity (SEP-32) and changelog partitions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grouping.errors import InvalidElasticityFactor, UnsupportedGrouperConfiguration
from grouping.groupers import (
    AllSspToSingleTask,
    GroupByPartition,
    GroupBySystemStreamPartition,
    group_tasks,
    grouper_by_name,
)
from grouping.model import SSP, ContainerModel, JobModel, TaskModel
from grouping.task_names import parse_standby_task_name, parse_task_name, standby_task_name


def as_model(tasks: list[TaskModel]) -> JobModel:
    return JobModel.of(1, {}, [ContainerModel.of("p1", "host", tasks)])


INPUTS = [SSP("SystemA", "StreamA", p) for p in (0, 1, 2)] + [
    SSP("SystemA", "StreamB", p) for p in (1, 2, 0)
]


def test_group_by_partition_factor_1_uses_samza_names() -> None:
    tasks = group_tasks(GroupByPartition(), INPUTS, 1)
    assert [t.name for t in tasks] == ["Partition 0", "Partition 1", "Partition 2"]
    assert tasks[0].ssps == (SSP("SystemA", "StreamA", 0), SSP("SystemA", "StreamB", 0))
    assert [t.changelog_partition for t in tasks] == [0, 1, 2]


def test_group_by_partition_with_elasticity_makes_virtual_tasks() -> None:
    tasks = group_tasks(GroupByPartition(), INPUTS, 2)
    assert [t.name for t in tasks] == [
        "Partition 0_0_2", "Partition 0_1_2", "Partition 1_0_2", "Partition 1_1_2",
        "Partition 2_0_2", "Partition 2_1_2",
    ]
    assert tasks[1].ssps == (SSP("SystemA", "StreamA", 0, 1), SSP("SystemA", "StreamB", 0, 1))
    # a virtual task uses its partition's changelog partition
    assert [t.changelog_partition for t in tasks] == [0, 0, 1, 1, 2, 2]


def test_group_by_ssp_with_and_without_elasticity() -> None:
    plain = group_tasks(GroupBySystemStreamPartition(), INPUTS[:2], 1)
    assert [t.name for t in plain] == [
        "SystemStreamPartition [SystemA, StreamA, 0]",
        "SystemStreamPartition [SystemA, StreamA, 1]",
    ]
    elastic = group_tasks(GroupBySystemStreamPartition(), INPUTS[:1], 4)
    assert [t.name for t in elastic] == [
        f"SystemStreamPartition [SystemA, StreamA, 0, {b}]_4" for b in range(4)
    ]
    assert elastic[3].ssps == (SSP("SystemA", "StreamA", 0, 3),)
    assert group_tasks(GroupBySystemStreamPartition(), [], 2) == []


def test_all_ssp_to_single_task_gives_each_processor_every_ssp() -> None:
    tasks = group_tasks(AllSspToSingleTask(), INPUTS, 1, processor_ids=["p2", "p1"])
    assert [t.name for t in tasks] == ["Task-p1", "Task-p2"]
    assert all(len(t.ssps) == 6 for t in tasks)


def test_all_ssp_to_single_task_refuses_elasticity() -> None:
    with pytest.raises(UnsupportedGrouperConfiguration, match="elasticity factor must be 1"):
        group_tasks(AllSspToSingleTask(), INPUTS, 2, processor_ids=["p1"])


def test_groupers_validate_the_factor() -> None:
    with pytest.raises(InvalidElasticityFactor):
        group_tasks(GroupByPartition(), INPUTS, 3)
    with pytest.raises(InvalidElasticityFactor):
        group_tasks(GroupByPartition(), INPUTS, 128)
    assert len(group_tasks(GroupByPartition(), INPUTS, 128, max_elasticity_factor=128)) == 384


def test_known_tasks_keep_their_changelog_partition_and_new_ones_get_free_numbers() -> None:
    g = GroupBySystemStreamPartition()
    before = group_tasks(g, [SSP("k", "a", 0), SSP("k", "b", 0)], 1)
    assert [t.changelog_partition for t in before] == [0, 1]
    after = group_tasks(g, [SSP("k", "a", 0), SSP("k", "a", 1), SSP("k", "b", 0)], 1,
                        previous=as_model(before))
    by_name = {t.name: t.changelog_partition for t in after}
    assert by_name["SystemStreamPartition [k, a, 0]"] == 0
    assert by_name["SystemStreamPartition [k, b, 0]"] == 1
    assert by_name["SystemStreamPartition [k, a, 1]"] == 2
    # scaling up keeps each partition group's changelog partition
    split = group_tasks(g, [SSP("k", "a", 0), SSP("k", "a", 1), SSP("k", "b", 0)], 2,
                        previous=as_model(after))
    by_name = {t.name: t.changelog_partition for t in split}
    assert by_name["SystemStreamPartition [k, a, 1, 1]_2"] == 2


def test_task_names_parse_back() -> None:
    for t in group_tasks(GroupByPartition(), INPUTS, 4):
        parts = parse_task_name(t.name)
        assert parts is not None
        assert (parts.partition, parts.key_bucket, parts.elasticity_factor) == (
            t.ssps[0].partition, t.ssps[0].key_bucket, 4)
    parts = parse_task_name("SystemStreamPartition [SystemA, StreamB, 7, 3]_8")
    assert parts is not None
    assert (parts.system, parts.stream, parts.partition, parts.key_bucket) == (
        "SystemA", "StreamB", 7, 3)
    assert parse_task_name("FooBar") is None


@given(name=st.text(min_size=1), replica=st.integers(0, 10_000))
def test_standby_names_parse_back(name: str, replica: int) -> None:
    assert parse_standby_task_name(standby_task_name(name, replica)) == (name, replica)


@pytest.mark.parametrize("name", [
    "Partition 1", "Standby-", "Standby-x", "Standby--1", "Standby-x-", "Standby-x-1a",
    "standby-x-1", "Standby-x-1.5"])
def test_names_that_are_not_standby_copies(name: str) -> None:
    assert parse_standby_task_name(name) is None


def test_grouper_by_name_names_the_known_ones() -> None:
    assert grouper_by_name("GroupByPartition").name == "GroupByPartition"
    with pytest.raises(UnsupportedGrouperConfiguration, match="known groupers"):
        grouper_by_name("GroupByNothing")
