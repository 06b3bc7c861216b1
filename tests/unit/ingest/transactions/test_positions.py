"""The frontier over an index of a book's END-known transactions in parts
(``ingest.transactions.positions``) finds the candidates the loop over every state found, and
columns joined from parts are the columns of the whole: whatever the states, the tails and
where the parts are cut."""

from __future__ import annotations

import math
from collections.abc import Mapping
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.transactions import PartitionTail, TransactionBook, TxnState
from ingest.transactions.head import EndedColumns
from ingest.transactions.positions import EndedIndex, EndedPart

COLLECTIONS = ("public.a", "public.b", "public.c")
IDS = [f"T{n}" for n in range(12)]


def reference_candidates(book: TransactionBook, tails: Mapping[object, PartitionTail]) -> tuple:
    """The frontier as the book computed it before the index: a dict of every id, a loop over
    every state (kept here as the reference)."""
    index = {t.id: i for i, t in enumerate(book.ended)}
    settled = {t.id for t in book.late} | set(book.recent)

    def passed(tail: PartitionTail) -> float:
        if tail.idle or tail.txn is None or tail.txn in settled:
            return 0
        last = index.get(tail.txn, math.inf)
        if tail.after is None or tail.after in settled or last == math.inf:
            return last
        return last + 1 if index.get(tail.after, math.inf) > last else last

    reach: dict[str | None, float] = {}
    for tail in tails.values():
        reach[tail.collection] = min(reach.get(tail.collection, math.inf), passed(tail))
    anywhere = min(reach.values(), default=math.inf)
    unknown = reach.get(None, math.inf)
    wanted = None if book.collections is None else frozenset(book.collections)
    out = []
    for i, state in enumerate(book.ended):
        touched = state.touched
        if any(c not in reach and (wanted is None or c in wanted) for c in touched):
            limit: float = -1
        else:
            limit = min(min((reach.get(c, math.inf) for c in touched), default=anywhere), unknown)
        if i >= limit:
            break
        out.append(state.id)
    return tuple(out)


@st.composite
def states(draw: st.DrawFn) -> tuple[TxnState, ...]:
    ids = draw(st.lists(st.sampled_from(IDS), max_size=10))  # an id twice: the last counts
    out = []
    for txn in ids:
        touched = tuple(draw(st.lists(st.sampled_from(COLLECTIONS), max_size=2, unique=True)))
        total = draw(st.one_of(st.none(), st.integers(1, 70)))
        out.append(TxnState(txn, 1.0, seen=draw(st.integers(0, 7)) * 2, ended=True, total=total,
                            expected=draw(st.one_of(st.none(), st.integers(0, 5))),
                            touched=touched))  # fmt: skip
    return tuple(out)


TXN = st.one_of(st.none(), st.sampled_from([*IDS, "open", "late", "recent"]))
TAILS = st.dictionaries(
    st.tuples(st.sampled_from([*COLLECTIONS, "public.z"]), st.integers(0, 1)),
    st.builds(
        PartitionTail,
        txn=TXN,
        idle=st.booleans(),
        collection=st.one_of(st.none(), st.sampled_from(COLLECTIONS)),
        after=TXN,
    ),
    max_size=6,
)


def split(items: tuple[TxnState, ...], cuts: list[int]) -> list[tuple[TxnState, ...]]:
    bounds = [0, *sorted(min(c, len(items)) for c in cuts), len(items)]
    return [items[lo:hi] for lo, hi in pairwise(bounds)]


@settings(max_examples=500, deadline=None)
@given(states(), TAILS, st.lists(st.integers(0, 10), max_size=3), st.data())
def test_the_index_in_parts_finds_the_candidates_the_loop_found(
    ended: tuple[TxnState, ...],
    tails: dict[object, PartitionTail],
    cuts: list[int],
    data: st.DataObject,
) -> None:
    collections = data.draw(st.one_of(st.none(), st.just(COLLECTIONS[:2]), st.just(COLLECTIONS)))
    book = TransactionBook(
        ended=ended,
        late=(TxnState("late", 1.0),),
        recent=("recent",),
        collections=collections,
    )
    index = EndedIndex(ended, [EndedPart.of(part) for part in split(ended, cuts)])
    expected = reference_candidates(book, tails)
    assert book.frontier_candidates(tails, index) == expected
    assert book.frontier_candidates(tails) == expected  # an index of its own, in one part


def test_an_index_of_another_tuple_is_not_used() -> None:
    """The book checks the index is of its own states (by identity), never trusting stale
    places: here the stale index would put T2 first."""
    ended = tuple(TxnState(t, 1.0, ended=True, total=1, expected=1) for t in ("T1", "T2"))
    book = TransactionBook(ended=ended)
    stale = EndedIndex(ended[::-1], [EndedPart.of(ended[::-1])])
    tails = {("t", 0): PartitionTail(txn="T2")}
    assert book.frontier_candidates(tails, stale) == ("T1",) == reference_candidates(book, tails)


@settings(max_examples=300, deadline=None)
@given(states(), st.lists(st.integers(0, 10), max_size=3))
def test_columns_joined_from_parts_are_the_columns_of_the_whole(
    ended: tuple[TxnState, ...], cuts: list[int]
) -> None:
    whole = EndedColumns.of(ended)
    joined = EndedColumns.joined(ended, [EndedColumns.of(part) for part in split(ended, cuts)])
    assert joined.states is ended
    assert joined.ids.to_pylist() == whole.ids.to_pylist()
    for name in ("seen", "valid", "need"):
        assert np.array_equal(getattr(joined, name), getattr(whole, name))


def test_parts_must_add_up_to_the_states() -> None:
    ended = (TxnState("T1", 1.0), TxnState("T2", 1.0))
    with pytest.raises(ValueError, match="2 states"):
        EndedIndex(ended, [EndedPart.of(ended[:1])])
