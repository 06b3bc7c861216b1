"""Commit order over a transaction topic of several partitions (issue 46): END markers spread over
N partitions, each partition in commit order, read in batches cut anywhere; what the order
releases is always a prefix of commit order, and never passes an END still to come."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.transactions import (
    EndOrder,
    MarkerStatus,
    OnTimeout,
    TransactionBook,
    TransactionMarker,
    TxnEvents,
    UnorderedTransactions,
)

TOPIC = "shop.transaction"


def end_at(txn: int, lsn: int) -> TransactionMarker:
    """An END as the PostgreSQL connector's are decoded: id ``txn``, commit position ``lsn``."""
    position = f"{lsn:016x}{'0' * 16}"
    return TransactionMarker(MarkerStatus.END, str(txn), 1, (), None, position)


@dataclass
class Topic:
    """The transaction topic: per partition its ENDs, in commit order."""

    partitions: list[list[TransactionMarker]]

    @property
    def numbers(self) -> tuple[int, ...]:
        return tuple(range(len(self.partitions)))


@st.composite
def topics(draw: st.DrawFn) -> Topic:
    count = draw(st.integers(2, 4))
    ends = draw(st.integers(1, 30))
    homes = draw(st.lists(st.integers(0, count - 1), min_size=ends, max_size=ends))
    partitions: list[list[TransactionMarker]] = [[] for _ in range(count)]
    for n, home in enumerate(homes):
        partitions[home].append(end_at(100 + n, 1000 + 8 * n))
    return Topic(partitions)


@st.composite
def reads(draw: st.DrawFn, topic: Topic) -> list[dict[int, int]]:
    """Batches: how far each partition has been read after each one (never backwards)."""
    upto = [0] * len(topic.partitions)
    batches = []
    for _ in range(draw(st.integers(1, 12))):
        for p, ends in enumerate(topic.partitions):
            upto[p] = draw(st.integers(upto[p], len(ends)))
        batches.append(dict(enumerate(upto)))
    batches.append({p: len(ends) for p, ends in enumerate(topic.partitions)})  # all read
    return batches


def commit_order(marker: TransactionMarker) -> int:
    return int(marker.id)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_released_ends_are_a_prefix_of_commit_order(data: st.DataObject) -> None:
    topic = data.draw(topics())
    order, released, done = EndOrder(), [], dict.fromkeys(topic.numbers, 0)
    for batch in data.draw(reads(topic)):
        ends = {p: topic.partitions[p][done[p] : upto] for p, upto in batch.items()}
        order = order.take(ends, batch, 0.0, TOPIC, len(topic.partitions))
        done = batch
        out, order = order.release(topic.numbers)
        released += out
        everything = sorted((m for ms in topic.partitions for m in ms), key=commit_order)
        assert released == everything[: len(released)]  # never one before an earlier one
    if all(topic.partitions):  # all read: released up to the lowest partition's last END
        lowest = min(commit_order(ends[-1]) for ends in topic.partitions)
        everything = [m for ms in topic.partitions for m in ms]
        assert len(released) == sum(commit_order(m) <= lowest for m in everything)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_idle_partitions_pass_only_ends_read_long_enough_ago(data: st.DataObject) -> None:
    """A partition read to its end passes the ENDs read ``idle_s`` before; with every END
    already in its partition when read (the premise), nothing is released out of order."""
    topic = data.draw(topics())
    order, released, done = EndOrder(), [], dict.fromkeys(topic.numbers, 0)
    for clock, batch in enumerate(data.draw(reads(topic))):
        ends = {p: topic.partitions[p][done[p] : upto] for p, upto in batch.items()}
        order = order.take(ends, batch, float(clock), TOPIC, len(topic.partitions))
        done = batch
        idle = [p for p in topic.numbers if batch[p] == len(topic.partitions[p])]
        order = order.pass_idle(idle, read_by=clock - 1.0)
        out, order = order.release(topic.numbers)
        released += out
        everything = sorted((m for ms in topic.partitions for m in ms), key=commit_order)
        assert released == everything[: len(released)]
    order = order.pass_idle(topic.numbers, read_by=1e9)  # at last, everything is old
    out, order = order.release(topic.numbers)
    assert len(released + out) == sum(map(len, topic.partitions))
    assert order.pending == ()


def test_a_partition_never_read_keeps_everything_back() -> None:
    order = EndOrder().take({0: [end_at(1, 10)], 1: [end_at(2, 20)]}, {0: 1, 1: 1}, 0.0, TOPIC, 3)
    released, order = order.release((0, 1, 2))
    assert released == []
    assert order.blocked_by((0, 1, 2)) == (0, 2)  # 0 is not past END 2 either
    released, _ = order.pass_idle([2], read_by=0.0).release((0, 1, 2))
    assert [m.id for m in released] == ["1"]  # partition 0 may still hold one before 20
    released, _ = order.pass_idle([0, 2], read_by=0.0).release((0, 1, 2))
    assert [m.id for m in released] == ["1", "2"]


def test_an_end_without_a_position_is_refused_by_name() -> None:
    gtid = TransactionMarker(MarkerStatus.END, "3E11FA47-71CA-11E1-9E33-C80AA9429562:23", 1)
    with pytest.raises(UnorderedTransactions) as caught:
        EndOrder().take({0: [gtid]}, {0: 1}, 0.0, TOPIC, 3)
    text = str(caught.value)
    assert "shop.transaction has 3 partitions" in text
    assert "recreate the topic with 1 partition, or set transactions: eventual" in text


def test_the_order_is_stored_with_the_book() -> None:
    order = EndOrder().take({0: [end_at(1, 10)], 1: []}, {0: 1, 1: 0}, 5.0, TOPIC, 2)
    book = TransactionBook(order=order)
    assert TransactionBook.from_json(book.to_json()) == book


def test_a_late_end_is_published_as_an_exception_and_the_frontier_stays() -> None:
    """An END released below what was published already (a delivery later than the idleness
    rule allowed): published, named in the exceptions, and the watermark does not go back."""
    book = TransactionBook().add_markers([end_at(2, 20)], now=0.0)
    book = book.add_events({"2": TxnEvents.of([1])}, now=0.0)
    first = book.decide(1.0, 300.0, OnTimeout.WAIT)
    book = book.apply(first)
    assert first.frontier is not None and first.frontier.txn == "2"
    late = book.add_markers([end_at(1, 10)], now=2.0).add_events({"1": TxnEvents.of([1])}, 2.0)
    decision = late.decide(3.0, 300.0, OnTimeout.WAIT)
    assert decision.publish == ("1",)
    assert decision.exceptions == ("1",) and decision.out_of_order == ("1",)
    assert decision.frontier == first.frontier
    settled, _ = late.settle({"1": 0b10}, 3.0, 300.0, OnTimeout.WAIT)
    assert settled.frontier == first.frontier and settled.exceptions == ("1",)
