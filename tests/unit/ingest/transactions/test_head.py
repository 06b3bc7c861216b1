"""The complete head counted in columns (``ingest.transactions.head``) decides exactly as the
book's own loop over its states and a dict of the tasks' masks: the same head, the same ranks
left for the rest of the book, so the same decision and the same book after it."""

from __future__ import annotations

import copy

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.sink.consistent import BatchTransactions, TxnPolicy
from ingest.sink.report import TaskReport, TxnRanks
from ingest.transactions import OnTimeout, TransactionBook
from ingest.transactions.book import TxnState
from ingest.transactions.head import EndedColumns

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


@st.composite
def batches(draw: st.DrawFn) -> tuple[TransactionBook, list[dict[str, int]]]:
    """A book of END-known transactions and the masks two or three tasks report: of some of
    them, and of transactions the book has no END of."""
    count = draw(st.integers(0, 12))
    ended = tuple(draw(states(f"T{i}")) for i in range(count))
    ids = [t.id for t in ended] + ["open1", "open2"]
    reports = []
    for _ in range(draw(st.integers(1, 3))):
        masks: dict[str, int] = {}
        for txn in draw(st.lists(st.sampled_from(ids), max_size=len(ids))):
            for rank in draw(st.lists(st.integers(1, 6), min_size=1, max_size=6)):
                masks[txn] = masks.get(txn, 0) | 1 << rank
        reports.append(masks)
    return TransactionBook(ended=ended), reports


def decided(book: TransactionBook, masks: list[dict[str, int]], *, columns: bool) -> object:
    txn = BatchTransactions(
        book,
        POLICY,
        now=10.0,
        candidates=(),
        settled=frozenset(),
        columns=EndedColumns.of(book.ended) if columns else None,
    )
    decision = txn.decide([TaskReport(txn_ranks=TxnRanks.of(m)) for m in masks])
    return decision, txn.after


@settings(max_examples=400, deadline=None)
@given(batches())
def test_the_columns_decide_as_the_books_loop_does(batch: tuple[TransactionBook, list]) -> None:
    book, masks = batch
    assert decided(book, masks, columns=True) == decided(book, masks, columns=False)


def test_the_columns_stop_at_the_first_transaction_they_cannot_hold() -> None:
    ended = (
        TxnState("T1", 1.0, seen=0b10, ended=True, total=2, expected=2),
        TxnState("T2", 1.0, seen=1 << WIDE_RANK, ended=True, total=WIDE_RANK, expected=1),
        TxnState("T3", 1.0, ended=True, total=1, expected=1),
    )
    columns = EndedColumns.of(ended)
    assert len(columns) == 1
    head, rest = columns.split(pa.array(["T1", "T3"]), np.array([0b100, 0b10], np.uint64))
    assert head == 1 and rest == {"T3": 0b10}  # the book's loop goes on from T2
    book = TransactionBook(ended=ended)
    assert decided(book, [{"T1": 0b100, "T3": 0b10}], columns=True) == decided(
        book, [{"T1": 0b100, "T3": 0b10}], columns=False
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
