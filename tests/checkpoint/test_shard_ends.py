"""Parents before children, on a model of a resharding stream: keyed records go to the
open shard whose hash range holds the key's hash; splits and merges close shards at random
points; key spaces (shard, key bucket) are processed in random order, each only when
``waiting_for`` says its parents' key spaces are finished. Every key's records come out
in the order they went in, and nothing is left unprocessed."""

from __future__ import annotations

import hashlib
import zlib
from collections import defaultdict
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from checkpoint.model import ResetPolicy, StartOffset
from checkpoint.shard_ends import waiting_for
from grouping.model import SystemStreamPartition
from grouping.shards import MAX_HASH_KEY, Shard

STREAM = ("kinesis", "orders")
F = 4


def _hash(key: str) -> int:
    return int.from_bytes(hashlib.md5(key.encode()).digest(), "big")  # as Kinesis does


def _bucket(key: str) -> int:
    return zlib.crc32(key.encode()) % F


class Stream:
    def __init__(self) -> None:
        self.shards: dict[int, Shard] = {0: Shard(0, (), (0, MAX_HASH_KEY), 0)}
        self.records: dict[int, list[tuple[int, str]]] = {0: []}  # shard -> (seq, key)
        self.seq = 0

    def open(self) -> list[Shard]:
        return [s for s in self.shards.values() if not s.closed]

    def put(self, key: str) -> None:
        h = _hash(key)
        shard = next(s for s in self.open() if s.hash_key_range[0] <= h <= s.hash_key_range[1])
        self.seq += 1
        self.records[shard.partition].append((self.seq, key))

    def _close(self, p: int) -> None:
        self.seq += 1
        s = self.shards[p]
        self.shards[p] = Shard(p, s.parents, s.hash_key_range, s.starting_sequence, self.seq)

    def _child(self, parents: tuple[int, ...], low: int, high: int) -> None:
        p = max(self.shards) + 1
        self.seq += 1
        self.shards[p] = Shard(p, parents, (low, high), self.seq)
        self.records[p] = []

    def split(self, pick: int, at: float) -> None:
        s = sorted(self.open(), key=lambda s: s.partition)[pick % len(self.open())]
        low, high = s.hash_key_range
        if high - low < 2:
            return
        middle = low + 1 + int((high - low - 1) * at)
        self._close(s.partition)
        self._child((s.partition,), low, middle - 1)
        self._child((s.partition,), middle, high)

    def merge(self, pick: int) -> None:
        ordered = sorted(self.open(), key=lambda s: s.hash_key_range)
        if len(ordered) < 2:
            return
        i = pick % (len(ordered) - 1)
        a, b = ordered[i], ordered[i + 1]
        self._close(a.partition)
        self._close(b.partition)
        self._child(tuple(sorted((a.partition, b.partition))), a.hash_key_range[0],
                    b.hash_key_range[1])


events = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 30)),
    st.tuples(st.just("split"), st.integers(0, 50), st.floats(0, 1)),
    st.tuples(st.just("merge"), st.integers(0, 50)),
    st.tuples(st.just("process"), st.integers(0, 10_000)),
), max_size=120)


@given(events)
def test_waiting_for_keeps_every_keys_order_across_reshards(script: list[tuple[Any, ...]]
                                                           ) -> None:
    stream = Stream()
    committed: dict[tuple[int, int], int] = {}  # (shard, bucket) -> next offset to read
    out: dict[str, list[int]] = defaultdict(list)

    def start_of(space: SystemStreamPartition) -> StartOffset:
        return committed.get((space.partition, space.key_bucket), ResetPolicy.EARLIEST)

    def step(shard: int, bucket: int) -> bool:
        """Process the next record of one key space if it may; True if it did anything."""
        ssp = SystemStreamPartition(*STREAM, shard, bucket)
        if waiting_for([ssp], {STREAM: stream.shards}, start_of):
            return False
        start = committed.get((shard, bucket), 0)
        todo = [(seq, k) for seq, k in stream.records[shard] if seq >= start
                and _bucket(k) == bucket]
        if todo:
            seq, key = todo[0]
            out[key].append(seq)
            committed[(shard, bucket)] = seq + 1
            return True
        end = stream.shards[shard].end_offset
        if end is not None and start < end:  # read to its end: commit the end
            committed[(shard, bucket)] = end
            return True
        return False

    for event in script:
        if event[0] == "put":
            stream.put(f"key-{event[1]}")
        elif event[0] == "split":
            stream.split(int(event[1]), float(event[2]))
        elif event[0] == "merge":
            stream.merge(int(event[1]))
        else:
            spaces = [(p, b) for p in sorted(stream.shards) for b in range(F)]
            step(*spaces[int(event[1]) % len(spaces)])
    while any(step(p, b) for p in sorted(stream.shards) for b in range(F)):
        pass  # drain: everything must become processable
    produced: dict[str, list[int]] = defaultdict(list)
    for seq, key in sorted(r for rs in stream.records.values() for r in rs):
        produced[key].append(seq)
    assert out == produced  # nothing lost, nothing twice, each key in order


def test_a_child_waits_only_for_its_own_bucket_of_each_parent() -> None:
    parents = {0: Shard(0, (), (0, 9), 0, 100), 1: Shard(1, (), (10, 19), 1, 200),
               2: Shard(2, (0, 1), (0, 19), 300)}
    starts: dict[tuple[int, int], StartOffset] = {(0, 1): 101, (1, 1): 150, (0, 2): 101,
                                                  (1, 2): 201}

    def start_of(space: SystemStreamPartition) -> StartOffset:
        return starts.get((space.partition, space.key_bucket), ResetPolicy.EARLIEST)

    def child(bucket: int) -> list[SystemStreamPartition]:
        return waiting_for([SystemStreamPartition(*STREAM, 2, bucket)], {STREAM: parents},
                           start_of)

    assert child(1) == [SystemStreamPartition(*STREAM, 1, 1)]  # parent 1 not at its end
    assert child(2) == []  # both parents' bucket 2 finished
    assert child(0) == [SystemStreamPartition(*STREAM, 0, 0),
                        SystemStreamPartition(*STREAM, 1, 0)]  # no checkpoint: unfinished
    del parents[1]  # expired: nothing left to wait for
    assert child(1) == []
