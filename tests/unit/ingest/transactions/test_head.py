"""The complete head counted in columns (``ingest.transactions.head``) decides exactly as the
book's own loop over its states and a dict of the tasks' masks: the same head, the same ranks
left for the rest of the book, so the same decision and the same book after it."""

from __future__ import annotations

import copy

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.sink.consistent import BatchTransactions, CandidateNotPublished, TxnPolicy
from ingest.sink.report import TaskReport, TxnRanks
from ingest.transactions import OnTimeout, TransactionBook
from ingest.transactions.book import TxnState
from ingest.transactions.head import EndedColumns
from tests.unit.ingest.sink.support import placed_ranks

POLICY = TxnPolicy(max_hold_s=300.0, on_timeout=OnTimeout.WAIT)
#: A rank past the columns' 64 bits.
WIDE_RANK = 70


@st.composite
def states(draw: st.DrawFn, txn: str) -> TxnState:
    """An END-known transaction; mostly one that a batch's ranks can complete, sometimes one
    the columns cannot hold (no counts, a rank past 63, a total past 63)."""
    total = draw(st.one_of(st.integers(1, 6), st.just(WIDE_RANK), st.none()))
    top = 6 if total is None else total
    seen = 0
    for rank in draw(st.lists(st.integers(1, top), max_size=3)):
        seen |= 1 << rank
    expected = draw(st.one_of(st.integers(0, 6), st.none()))
    return TxnState(txn, first_seen=1.0, seen=seen, ended=True, total=total, expected=expected)


#: A task's runs: (transaction, mask, whether the C loop placed it by the candidate's position).
Runs = list[tuple[str, int, bool]]


@st.composite
def batches(draw: st.DrawFn) -> tuple[TransactionBook, int, list[Runs]]:
    """A book of END-known transactions, how many of them are the batch's candidates, and the
    runs two or three tasks report: of some of them (a candidate's mostly by its position,
    sometimes by id, as the C loop's odd events are), and of transactions the book has no END
    of."""
    count = draw(st.integers(0, 12))
    ended = tuple(draw(states(f"T{i}")) for i in range(count))
    candidates = draw(st.integers(0, count))
    ids = [t.id for t in ended] + ["open1", "open2"]
    reports = []
    for _ in range(draw(st.integers(1, 3))):
        runs: Runs = []
        for txn in draw(st.lists(st.sampled_from(ids), max_size=len(ids))):
            mask = 0
            for rank in draw(st.lists(st.integers(1, 6), min_size=1, max_size=6)):
                mask |= 1 << rank
            placeable = txn in ids[:candidates]
            runs.append((txn, mask, placeable and draw(st.integers(0, 4)) > 0))
        reports.append(runs)
    return TransactionBook(ended=ended), candidates, reports


def report(runs: Runs, candidates: tuple[str, ...]) -> TaskReport:
    placed = [(candidates.index(t), m) for t, m, by_position in runs if by_position]
    by_id = [(t, m) for t, m, by_position in runs if not by_position]
    return TaskReport(txn_ranks=placed_ranks(placed, by_id, len(candidates)))


def decided(book: TransactionBook, candidates: int, tasks: list[Runs], *, columns: bool) -> object:
    direct = tuple(t.id for t in book.ended[:candidates])
    txn = BatchTransactions(
        book,
        POLICY,
        now=10.0,
        candidates=direct,
        settled=frozenset(),
        columns=EndedColumns.of(book.ended) if columns else None,
    )
    try:
        decision = txn.decide([report(runs, direct) for runs in tasks])
    except CandidateNotPublished as exc:
        return "not published", exc.txn, txn.cut
    return decision, txn.after


@settings(max_examples=400, deadline=None)
@given(batches())
def test_the_columns_decide_as_the_books_loop_does(
    batch: tuple[TransactionBook, int, list],
) -> None:
    book, candidates, tasks = batch
    assert decided(book, candidates, tasks, columns=True) == decided(
        book, candidates, tasks, columns=False
    )


def test_the_columns_stop_at_the_first_transaction_they_cannot_hold() -> None:
    ended = (
        TxnState("T1", 1.0, seen=0b10, ended=True, total=2, expected=2),
        TxnState("T2", 1.0, seen=1 << WIDE_RANK, ended=True, total=WIDE_RANK, expected=1),
        TxnState("T3", 1.0, ended=True, total=1, expected=1),
    )
    columns = EndedColumns.of(ended)
    assert len(columns) == 1
    no_place = (np.zeros(0, np.int64), np.zeros(0, np.uint64))
    by_id = (pa.array(["T1", "T3"]), np.array([0b100, 0b10], np.uint64))
    head, rest = columns.split(*no_place, *by_id, ())
    assert head == 1 and rest == {"T3": 0b10}  # the book's loop goes on from T2
    # a candidate past the columns comes back by its id, for the book's loop
    placed = (np.array([0, 2, 0]), np.array([0b100, 0b10, 0b100], np.uint64))
    head, rest = columns.split(*placed, pa.array([], pa.string()), np.zeros(0, np.uint64),
                               ("T1", "T2", "T3"))  # fmt: skip
    assert head == 1 and rest == {"T3": 0b10}
    book = TransactionBook(ended=ended)
    tasks: list[Runs] = [[("T1", 0b100, True), ("T3", 0b10, True)]]
    for candidates in (0, 1, 3):
        assert decided(book, candidates, tasks if candidates == 3 else [], columns=True) == decided(
            book, candidates, tasks if candidates == 3 else [], columns=False
        )


def test_columns_of_another_book_are_not_used() -> None:
    """Columns are checked against the book they were built from (by identity), so a batch
    whose book changed decides from the book, never from stale columns."""
    first = TransactionBook(ended=(TxnState("T1", 1.0, ended=True, total=1, expected=1),))
    other = TransactionBook(ended=(TxnState("T1", 1.0, ended=True, total=2, expected=2),))
    txn = BatchTransactions(
        other,
        POLICY,
        now=10.0,
        candidates=(),
        settled=frozenset(),
        columns=EndedColumns.of(first.ended),
    )
    decision = copy.copy(txn).decide([TaskReport(txn_ranks=TxnRanks.of({"T1": 0b10}))])
    assert decision.publish == ()  # T1 of `other` needs two events: one was seen
