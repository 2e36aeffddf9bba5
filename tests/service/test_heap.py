"""The frozen heap: a new job model takes the heap out of the collector's sight; an idle
coordinator thaws it once, collecting the cyclic garbage that waited meanwhile."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from service.heap import FrozenHeap


class Node:
    """A reference cycle once ``other`` is set (reference counting alone never frees it)."""

    other: Node | None = None


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    yield
    gc.unfreeze()


def test_settled_freezes_and_an_idle_heap_thaws_once_collecting_cycles() -> None:
    now = [100.0]
    heap = FrozenHeap(thaw_after_s=60.0, monotonic=lambda: now[0])
    assert not heap.thaw_if_idle()  # nothing frozen yet
    cycle = Node()
    cycle.other = cycle
    gone = weakref.ref(cycle)
    heap.settled()
    assert gc.get_freeze_count() > 0
    del cycle
    gc.collect()
    assert gone() is not None  # frozen: the collector does not see it
    now[0] += 59.0
    assert not heap.thaw_if_idle()  # published a minute ago: not idle yet
    now[0] += 2.0
    assert heap.thaw_if_idle()
    assert gone() is None  # collected by the thaw
    assert gc.get_freeze_count() > 0  # and frozen again
    now[0] += 600.0
    assert not heap.thaw_if_idle()  # once per quiet period: nothing was frozen since


def test_acyclic_models_are_freed_while_frozen() -> None:
    heap = FrozenHeap(monotonic=lambda: 0.0)
    entry = Node()  # held only through the model
    model: dict[str, object] = {"tasks": tuple((f"Partition {p}", p) for p in range(1000)),
                                "entry": entry}
    gone = weakref.ref(entry)
    heap.settled()
    del model, entry
    assert gone() is None  # reference counting frees it, frozen or not


def test_constant_rebalances_still_thaw_every_so_often() -> None:
    now = [0.0]
    heap = FrozenHeap(thaw_after_s=60.0, thaw_every_s=600.0, monotonic=lambda: now[0])
    thaws = 0
    for _ in range(40):  # a new model every 30 s for 20 minutes: never a minute idle
        heap.settled()
        now[0] += 30.0
        thaws += heap.thaw_if_idle()
    assert thaws == 2


def test_running_spaces_full_collections_out_and_stopping_restores_them() -> None:
    import asyncio

    before = gc.get_threshold()

    async def run() -> tuple[int, int, int]:
        heap = FrozenHeap(full_every=100)
        heap.start()
        during = gc.get_threshold()
        await heap.stop()
        return during

    assert asyncio.run(run()) == (before[0], before[1], 100)
    assert gc.get_threshold() == before


def test_generating_pauses_the_collector_and_freezes_what_it_made() -> None:
    heap = FrozenHeap(monotonic=lambda: 5.0)
    assert gc.isenabled()
    frozen_before = gc.get_freeze_count()
    with heap.generating():
        assert not gc.isenabled()
        made = [Node() for _ in range(1000)]
        for node in made:
            node.other = node  # cycles, so that only the collector could free them
        gone = weakref.ref(made[0])
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen_before + 1000
    del made, node
    gc.collect()
    assert gone() is not None  # frozen: out of the collector's sight until a thaw
    assert heap.thaw_if_idle() is False  # just settled: not idle
    gc.unfreeze()
    gc.collect()
    assert gone() is None


def test_generating_restores_the_collector_as_it_was_even_on_failure() -> None:
    heap = FrozenHeap(monotonic=lambda: 0.0)
    with pytest.raises(RuntimeError), heap.generating():
        raise RuntimeError("generation failed")
    assert gc.isenabled()
    gc.disable()
    try:
        with heap.generating():
            pass
        assert not gc.isenabled()  # the caller had it off: it stays off
    finally:
        gc.enable()
