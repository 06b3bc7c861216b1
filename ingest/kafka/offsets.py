"""Offsets of the Kafka source and the pure arithmetic of planning micro-batches.

An offset is, per topic-partition, the offset of the *next* record to read. Spark stores it in the
checkpoint as JSON ``{"topic": {"0": 42, "1": 7}}`` (topics and partitions sorted, so equal
offsets always serialise to equal text; Spark compares them as text to find "no new data").
The same shape is what the ingest job writes into the catalog with each commit and hands back
as ``startingOffsets``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

#: Sentinels accepted in ``startingOffsets`` JSON, as in Spark's Kafka source.
EARLIEST = -2
LATEST = -1

OffsetsJson = dict[str, dict[str, int]]


class PartitionId(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


Offsets = dict[PartitionId, int]


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition: one Spark input partition, one read task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        """An upper bound of the records in the range (compaction and markers leave gaps)."""
        return self.end - self.start


def to_json(offsets: Mapping[PartitionId, int]) -> OffsetsJson:
    """The checkpoint form, sorted by topic then partition number."""
    out: OffsetsJson = {}
    for pid in sorted(offsets):
        out.setdefault(pid.topic, {})[str(pid.partition)] = offsets[pid]
    return out


def from_json(raw: Mapping[str, Mapping[str, int]] | None) -> Offsets:
    """Parse the checkpoint form (as Spark hands it back) into per-partition offsets."""
    return {
        PartitionId(topic, int(partition)): int(offset)
        for topic, partitions in (raw or {}).items()
        for partition, offset in partitions.items()
    }


def allocate(available: Mapping[PartitionId, int], limit: int) -> dict[PartitionId, int]:
    """Split ``limit`` offsets over partitions in proportion to what each has available.

    Largest-remainder rounding: the shares add up to exactly ``min(limit, total)``, no partition
    gets more than it has, and ties go to the lower partition id, so a replanned batch is the same.
    """
    total = sum(available.values())
    if total <= limit:
        return dict(available)
    shares = {pid: n * limit // total for pid, n in available.items()}
    spare = limit - sum(shares.values())
    by_remainder = sorted(available, key=lambda pid: (-(available[pid] * limit % total), pid))
    for pid in by_remainder[:spare]:
        shares[pid] += 1
    return shares


def next_end(
    start: Mapping[PartitionId, int],
    newest: Mapping[PartitionId, int],
    earliest: Mapping[PartitionId, int],
    limit: int | None,
) -> Offsets:
    """The end offsets of the next micro-batch.

    ``newest`` holds the newest offset of every partition the query should read now (high
    watermarks, or the Trigger.AvailableNow target); partitions not yet in ``start`` begin at
    ``earliest``. Partitions in ``start`` that vanished from ``newest`` keep their offset.
    """
    base = {pid: start.get(pid, earliest.get(pid, 0)) for pid in newest}
    available = {pid: max(0, newest[pid] - base[pid]) for pid in newest}
    shares = available if limit is None else allocate(available, limit)
    end = dict(start)
    end.update({pid: base[pid] + shares[pid] for pid in newest})
    return end


def plan_ranges(
    start: Mapping[PartitionId, int],
    end: Mapping[PartitionId, int],
    earliest: Callable[[PartitionId], int],
) -> list[OffsetRange]:
    """The non-empty ranges between two offsets, one per partition, in partition order.

    A partition missing from ``start`` is new since the last batch and is read from its earliest
    offset; so is one whose ``start`` lies beyond ``end`` (its offsets were reset and the loss
    was accepted with ``failOnDataLoss=false``).
    """
    ranges = []
    for pid in sorted(end):
        begin = start.get(pid)
        if begin is None or begin > end[pid]:
            begin = earliest(pid)
        if begin < end[pid]:
            ranges.append(OffsetRange(pid.topic, pid.partition, begin, end[pid]))
    return ranges


def group_ranges(
    ranges: Sequence[OffsetRange], rides: Callable[[str], bool]
) -> list[tuple[OffsetRange, ...]]:
    """The ranges of a batch as its input partitions: one per range, except that the ranges of
    topics ``rides`` names share the partition of the smallest other range (the first of equal
    ones) instead of taking one of their own; when every range is of such topics, they make one
    partition together.

    Why: a sink that reads those topics elsewhere (the transaction topic, which a
    ``transactions: consistent`` driver reads itself) would otherwise get a task per batch that
    does nothing, and on a small cluster it runs alone at the end of the batch's job."""
    riding = [rng for rng in ranges if rides(rng.topic)]
    own: list[tuple[OffsetRange, ...]] = [(rng,) for rng in ranges if not rides(rng.topic)]
    if not riding:
        return own
    if not own:
        return [tuple(riding)]
    smallest = min(range(len(own)), key=lambda i: own[i][0].size)
    own[smallest] = (*own[smallest], *riding)
    return own
