"""The coordinator keeps the few most recently used job models in memory."""

from __future__ import annotations

import pytest

from coordinator.model_cache import ModelCache
from grouping.model import JobModel


def model(version: int) -> JobModel:
    return JobModel.of(version, {}, [])


def test_the_least_recently_used_version_goes_first() -> None:
    cache = ModelCache(capacity=2)
    one, two, three = model(1), model(2), model(3)
    cache.put(one)
    cache.put(two)
    assert cache.get(1) is one  # now the most recently used
    cache.put(three)
    assert 2 not in cache and cache.get(2) is None
    assert cache.get(1) is one and cache.get(3) is three
    assert len(cache) == 2


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ModelCache(capacity=0)
