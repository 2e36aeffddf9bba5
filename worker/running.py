"""What a worker's one long-running query processes, from batch to batch (pure): the
running tasks (a ``QueryPlan``: their key spaces, starts and skip watermarks) and the
source plan the query reads (``worker.sources.source_plan``). A handover changes them at a batch
boundary; the query goes on.

* Removing tasks drops their key spaces (and the partitions no task reads any more).
* Adding tasks adds theirs at their resolved starts. A partition the query does not read
  yet starts where its new tasks start. A partition it reads already but past a new
  task's start is read again from there: its source generation goes up, and the new
  task counts only batches of that generation (an older batch may still be in flight).
* Each batch runs the plan :func:`for_batch` makes: the key spaces whose generation the
  batch's rows have reached, each from the furthest of its start and where it got to
  in an earlier batch (``done``), so a partition read again is processed again by none
  of the tasks that had read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from worker.plan import EARLIEST, LATEST, QueryPlan, SspStart
from worker.sources.source_plan import PartitionStart, SourcePlan, partition_key

#: (task, topic, partition) -> the next offset after what the task processed there
Done = Mapping[tuple[str, str, int], int]


@dataclass(frozen=True, slots=True)
class Running:
    """The running tasks and the source plan, with the next generation to hand out."""

    plan: QueryPlan
    source: SourcePlan = field(default_factory=SourcePlan)
    next_generation: int = 1

    @property
    def tasks(self) -> frozenset[str]:
        """The running tasks."""
        return frozenset(s.task for s in self.plan.starts)


def nothing(system: str = "kafka", factor: int = 1) -> Running:
    """No task running."""
    return Running(QueryPlan(0, factor, (), system=system))


def _key(plan: QueryPlan, topic: str, partition: int) -> str:
    # Kinesis sources know one stream: shards by number; Kafka: topic/partition
    return str(partition) if plan.system == "kinesis" else partition_key(topic, partition)


def _source_start(start: int) -> str:
    return {EARLIEST: "earliest", LATEST: "latest"}.get(start, str(start))


def remove(running: Running, tasks: Iterable[str]) -> Running:
    """``running`` without ``tasks`` (and the partitions no task reads any more). The
    tasks kept go on committing under the version they run under: the version that
    removed the others is not in force before its barrier is done (the coordinator fences
    a commit tagged with it until then), and a commit tagged with an older version is
    accepted as long as its tasks were this processor's in every version since."""
    gone = set(tasks)
    starts = tuple(s for s in running.plan.starts if s.task not in gone)
    kept = {(s.topic, s.partition) for s in starts}
    skips = tuple(w for w in running.plan.skips if (w.topic, w.partition) in kept
                  and any(s.topic == w.topic and s.partition == w.partition
                          for s in starts))
    plan = replace(running.plan, starts=starts, skips=skips,
                   waiting=tuple(t for t in running.plan.waiting if t not in gone))
    keys = {_key(plan, t, p) for t, p in kept}
    source = SourcePlan(running.source.version + 1,
                        {k: v for k, v in running.source.partitions.items() if k in keys})
    return replace(running, plan=plan, source=source)


#: (topic, partition) -> (where this worker's processed batches of it got to: the end of
#: the last one with its records, the source generation that batch read at)
Read = Mapping[tuple[str, int], tuple[int, int]]


def read_after(read: Read, ends: Mapping[tuple[str, int], int],
               gens: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], tuple[int, int]]:
    """``read`` after a batch that read each partition to ``ends`` at ``gens``: a newer
    generation's end replaces an older one's (the partition is read again from
    elsewhere), the same generation's only moves forward, an older one's is ignored."""
    out = dict(read)
    for key, end in ends.items():
        gen = gens.get(key, 0)
        before = out.get(key)
        if before is None or gen > before[1]:
            out[key] = (end, gen)
        elif gen == before[1]:
            out[key] = (max(end, before[0]), gen)
    return out


def add(running: Running, new: QueryPlan, read: Read, done: Done) -> Running:
    """``running`` with the tasks of ``new`` (a plan of those tasks only, from their
    resolved checkpoints) added; ``read``: per partition, where this worker's processed
    batches got to and at which generation (:func:`read_after`); ``done``: where each
    running task got to. Commits from now on are tagged ``new.version``, or the running
    tasks' newer one: restores end in any order, and a plan of an older version whose
    tasks are still this processor's must not tag the tasks a newer version gave it with
    a version they were not its in (the coordinator would fence that commit)."""
    partitions = dict(running.source.partitions)
    generation = running.next_generation
    starts = list(running.plan.starts)
    for (topic, p), first in sorted(_earliest(new.starts).items()):
        key = _key(new, topic, p)
        known = partitions.get(key)
        if known is None or _rewinds(known, read.get((topic, p)), first):
            # read again from what every task of it still needs: a running task that
            # no batch of the partition's generation reached yet needs its start
            needed = _earliest([*new.starts, *(
                replace(s, start=done.get((s.task, s.topic, s.partition), s.start))
                for s in running.plan.starts if (s.topic, s.partition) == (topic, p))])
            partitions[key] = PartitionStart(_source_start(needed[(topic, p)]), generation)
            generation += 1
            gen = partitions[key].generation
        else:
            # its current generation reads from before this start, but a batch of an
            # older one still in flight may have read past it (planned before a task
            # added just now rewound the partition to where this one starts): count
            # from the current generation (a chaos run's slipped reading: a bucket
            # added right after its sibling's rewind to the same start ran, with
            # generation 0, in a batch planned before that rewind)
            gen = known.generation
        starts += [replace(s, generation=gen) for s in new.starts
                   if (s.topic, s.partition) == (topic, p)]
    endings = {(t, p): e for t, p, e in (*running.plan.endings, *new.endings)}
    if new.system == "kinesis":  # a shard's end, once the lineage has it
        by_shard = {p: e for (_, p), e in endings.items()}
        partitions = {k: replace(v, ending=by_shard.get(int(k), v.ending))
                      for k, v in partitions.items()}
    plan = replace(running.plan, version=max(new.version, running.plan.version),
                   factor=new.factor, key_hash=new.key_hash,
                   system=new.system, starts=tuple(starts),
                   skips=(*running.plan.skips, *new.skips),
                   endings=tuple(sorted((t, p, e) for (t, p), e in endings.items())))
    return Running(plan, SourcePlan(running.source.version + 1, partitions), generation)


def _rewinds(known: PartitionStart, read: tuple[int, int] | None, first: int) -> bool:
    """Whether a partition the query reads must be read again from ``first``: its
    processed batches of its current generation got past it (or, none processed yet,
    its planned start is). A batch of an older generation says nothing: the partition
    was planned again since (dropped and added back, or read again from elsewhere), and
    its next batch starts at the plan's start, which may be past ``first`` though that
    older batch ended before it (CI's stateful chaos loss: a bucket added after its
    sibling, whose start was further on, while this worker's last read of the
    partition, from an earlier lease, ended before both)."""
    if first == LATEST:
        return False
    got = read[0] if read is not None and read[1] == known.generation else None
    if got is None:  # nothing of it processed yet: where its reading began
        if known.start == "earliest":
            return False
        if known.start == "latest":
            return True  # resolved when first read: maybe past ``first``
        got = int(known.start)
    return first == EARLIEST or first < got


def retag(running: Running, version: int) -> Running:
    """The same tasks, committed under ``version`` from now on (a newer job model that
    kept this worker's assignment)."""
    return replace(running, plan=replace(running.plan, version=version))


def _earliest(starts: Iterable[SspStart]) -> dict[tuple[str, int], int]:
    """Per partition the earliest start of its key spaces (earliest wins over any offset;
    latest only if all are latest)."""
    out: dict[tuple[str, int], int] = {}
    for s in starts:
        key = (s.topic, s.partition)
        prev = out.get(key)
        if prev is None:
            out[key] = s.start
        elif EARLIEST in (prev, s.start):
            out[key] = EARLIEST
        elif prev == LATEST:
            out[key] = s.start
        elif s.start != LATEST:
            out[key] = min(prev, s.start)
    return out


def for_batch(plan: QueryPlan, generations: Mapping[tuple[str, int], int], done: Done
              ) -> QueryPlan:
    """The plan one batch runs: the key spaces whose partition the batch read at their
    generation or later (``generations``: the batch's generation per partition it has
    rows of), each starting at the furthest of its start and ``done``."""
    starts = []
    for s in plan.starts:
        gen = generations.get((s.topic, s.partition))
        if gen is None or gen < s.generation:
            continue
        got = done.get((s.task, s.topic, s.partition))
        starts.append(s if got is None or got <= s.start else replace(s, start=got))
    return replace(plan, starts=tuple(starts))


def advanced(done: Done, plan: QueryPlan, ends: Mapping[tuple[str, int], int],
             left: Done | None = None) -> dict[tuple[str, str, int], int]:
    """``done`` after a batch that ran ``plan`` (its :func:`for_batch` plan) and read
    each partition to ``ends`` (or, cut short, left a task's records from ``left`` on):
    never backwards (a task ahead of a partition read again stays where it was)."""
    out = dict(done)
    for s in plan.starts:
        end = ends.get((s.topic, s.partition))
        if end is not None and left:
            end = min(end, left.get((s.task, s.topic, s.partition), end))
        if end is not None:
            key = (s.task, s.topic, s.partition)
            out[key] = max(out.get(key, end), end)
    return out


def rewound(running: Running, done: Done, ends: Mapping[tuple[str, int], int]
            ) -> Running:
    """``running`` after a batch cut short (``worker.cuts``): a partition the batch read
    to its end in ``ends`` but one of its running tasks did not finish (``done``: where
    each got to) is read again from the furthest-behind task's point, at a new
    generation; every task goes on from its own point (:func:`for_batch`). A task that
    never ran on the partition (added after the batch was planned, its partition
    re-planned from its start) counts from its start: the cut tasks' points alone would
    make it skip its records in between."""
    needs: list[SspStart] = []
    cut_short: set[tuple[str, int]] = set()
    for s in running.plan.starts:
        key = (s.topic, s.partition)
        if key not in ends:
            continue
        got = done.get((s.task, s.topic, s.partition))
        if got is None:
            if s.start != LATEST:  # (latest: resolved when its partition is read)
                needs.append(s)
        elif got < ends[key]:
            needs.append(replace(s, start=got))
            cut_short.add(key)
    behind = {k: v for k, v in _earliest(needs).items() if k in cut_short}
    return read_again(running, behind) if behind else running


def read_again(running: Running, starts: Mapping[tuple[str, int], int]) -> Running:
    """``running`` with each partition of ``starts`` read again from there, at a new
    generation (every task goes on from its own point: :func:`for_batch`)."""
    partitions = dict(running.source.partitions)
    generation = running.next_generation
    for (topic, p), start in sorted(starts.items()):
        name = _key(running.plan, topic, p)
        if name in partitions:
            partitions[name] = replace(partitions[name], start=_source_start(start),
                                       generation=generation)
            generation += 1
    return replace(running, source=SourcePlan(running.source.version + 1, partitions),
                   next_generation=generation)


def needed_from(running: Running, done: Done, partitions: Iterable[tuple[str, int]]
                ) -> dict[tuple[str, int], int]:
    """Per partition of ``partitions``: where every running task of it still needs it
    read from (each from the furthest of its start and where it got to, ``done``), the
    earliest of them: reading it again from there skips nothing any task needs."""
    wanted = set(partitions)
    return _earliest(
        s if (got := done.get((s.task, s.topic, s.partition))) is None or got <= s.start
        else replace(s, start=got)
        for s in running.plan.starts if (s.topic, s.partition) in wanted)


def read_past(plan: QueryPlan, froms: Mapping[tuple[str, int], int]) -> list[SspStart]:
    """The key spaces of ``plan`` (a batch's, :func:`for_batch`) that the batch read
    from past their start (``froms``: where the batch's range of each partition begins):
    run, they would skip the records in between and commit past them. None should
    ever be: each partition goes on from where its last batch ended, or is read again
    from the furthest-behind start. A guard, so that a slip anywhere in the reading
    becomes a partition read again, not a silent loss."""
    return [s for s in plan.starts if s.start >= 0
            and froms.get((s.topic, s.partition), s.start) > s.start]


def only(plan: QueryPlan, tasks: Iterable[str]) -> QueryPlan:
    """``plan`` with the key spaces of ``tasks`` alone."""
    keep = set(tasks)
    starts = tuple(s for s in plan.starts if s.task in keep)
    partitions = {(s.topic, s.partition) for s in starts}
    return replace(plan, starts=starts,
                   skips=tuple(w for w in plan.skips if (w.topic, w.partition) in partitions),
                   waiting=tuple(t for t in plan.waiting if t in keep))
