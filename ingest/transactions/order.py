"""Commit order of source transactions whose END markers are spread over several partitions of
the transaction topic.

With one partition, the topic's order is commit order and the book takes END markers as they
come. With several (Debezium keys markers by transaction id, so the default partitioner spreads
them), each partition is in commit order but the partitions are read at different speeds: a
batch can hold the END of a later transaction from one partition and not yet the END of an
earlier one from another. Taken in topic order, the later one would be published first.

So the ENDs of a multi-partition topic go through an :class:`EndOrder` first. It orders them by
the source's commit position (PostgreSQL: the commit LSN in the id ``txId:LSN``; a source whose
ids carry no position has no total order here and is refused, :class:`UnorderedTransactions`)
and releases an END to the book only when every partition of the topic has been read past it:
each partition's *reach* is the position of the last END read from it, and what is at or
below the lowest reach is released, in position order. A partition's later ENDs commit after
its earlier ones, so nothing can still come that belongs before a released END.

A partition with nothing more to read would hold every later END back forever, so idleness
counts too (:meth:`EndOrder.pass_idle`): a partition read to its end at time T is taken to be
past every END the job read at T - ``idle_s`` or earlier, because the connector sent that
END's predecessors before it and its producer delivers them within that time. If it did not
(a delivery delayed by more than ``idle_s``), the late END is released below what was
published already: the versions committed in between lacked that transaction while claiming
whole ones up to their watermark, and only the commit that then publishes it can say so - it
names it in its exceptions and the job logs ``transaction_out_of_order``. The watermark never
moves back, and ``idle_s`` is the setting to raise where producers deliver that late.

The order is a value stored in the book (``job_state``), so a restart resumes with the reach of
every partition and the ENDs still pending.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ingest.transactions.markers import TransactionMarker
from ingest.transactions.policy import TransactionConfigError

__all__ = ["EndOrder", "PendingEnd", "UnorderedTransactions"]


class UnorderedTransactions(TransactionConfigError):
    """A transaction topic of several partitions whose END markers carry no commit position:
    their commit order cannot be known, so ``transactions: consistent`` cannot hold."""

    def __init__(self, topic: str, partitions: int, txn: str | None = None) -> None:
        which = f" (transaction {txn!r})" if txn is not None else ""
        super().__init__(
            f"transaction topic {topic} has {partitions} partitions and its END markers carry no "
            f"commit position{which}, so their commit order cannot be known: recreate the topic "
            "with 1 partition, or set transactions: eventual"
        )
        self.topic = topic
        self.partitions = partitions
        self.txn = txn


@dataclass(frozen=True)
class PendingEnd:
    """An END read but not released yet: its marker, its partition, when the job read it."""

    marker: TransactionMarker
    partition: int
    read_at: float

    @property
    def position(self) -> str:
        assert self.marker.position is not None  # EndOrder.take admits positioned ENDs only
        return self.marker.position


@dataclass(frozen=True)
class EndOrder:
    """The ENDs of a multi-partition transaction topic on their way to the book (see the module
    docstring). Every operation returns a new value."""

    reach: tuple[tuple[int, str], ...] = ()
    """Per partition, the commit position it has been read past (an END read from it, or
    passed by idleness); partitions never read from are absent."""
    pending: tuple[PendingEnd, ...] = ()
    """ENDs not released yet, in position order."""
    read_to: tuple[tuple[int, int], ...] = ()
    """Per partition, the offset the job has read it to (a partition with nothing to read has
    no range in a batch: this says whether it was read to its end)."""

    def take(
        self,
        ends: Mapping[int, Sequence[TransactionMarker]],
        read_to: Mapping[int, int],
        now: float,
        topic: str,
        count: int,
    ) -> EndOrder:
        """With a batch's END markers (per partition, in topic order) read at ``now``, and the
        offsets its ranges end at (``read_to``).

        Raises:
            UnorderedTransactions: an END carries no commit position (``topic`` and its
                partition ``count`` name the refusal).
        """
        reach = dict(self.reach)
        pending = list(self.pending)
        for partition, markers in ends.items():
            for marker in markers:
                position = marker.position
                if position is None:
                    raise UnorderedTransactions(topic, count, marker.id)
                reach[partition] = max(reach.get(partition, position), position)
                pending.append(PendingEnd(marker, partition, now))
        pending.sort(key=_position_of)
        offsets = {**dict(self.read_to), **read_to}
        return EndOrder(
            tuple(sorted(reach.items())), tuple(pending), tuple(sorted(offsets.items()))
        )

    def blocked_by(self, partitions: Iterable[int]) -> tuple[int, ...]:
        """The partitions (of ``partitions``, the topic's) whose reach keeps a pending END
        back: not read past the last of them."""
        if not self.pending:
            return ()
        last = self.pending[-1].position
        reach = dict(self.reach)
        return tuple(p for p in partitions if reach.get(p, "") < last)

    def pass_idle(self, idle: Iterable[int], read_by: float) -> EndOrder:
        """With each ``idle`` partition (read to its end) past every pending END read at
        ``read_by`` or earlier."""
        passed = [end.position for end in self.pending if end.read_at <= read_by]
        if not passed:
            return self
        top = max(passed)
        reach = dict(self.reach)
        for partition in idle:
            reach[partition] = max(reach.get(partition, top), top)
        return replace(self, reach=tuple(sorted(reach.items())))

    def release(self, partitions: Iterable[int]) -> tuple[list[TransactionMarker], EndOrder]:
        """The pending ENDs every one of ``partitions`` (the topic's) has been read past, in
        commit order, and the order without them."""
        reach = dict(self.reach)
        limits = [reach.get(p) for p in partitions]
        if not limits or any(limit is None for limit in limits) or not self.pending:
            return [], self
        point = min(limit for limit in limits if limit is not None)
        cut = 0
        while cut < len(self.pending) and self.pending[cut].position <= point:
            cut += 1
        released = [end.marker for end in self.pending[:cut]]
        return released, replace(self, pending=self.pending[cut:])

    def oldest_read(self) -> float | None:
        """When the job read the oldest pending END (None: none pending)."""
        return min((end.read_at for end in self.pending), default=None)


def _position_of(end: PendingEnd) -> str:
    return end.position
