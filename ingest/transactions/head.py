"""The complete head of a batch, counted in columns: how many END-known transactions, from the
first in commit order, the tasks' ranks complete.

At a batch's decision the driver asks :meth:`TransactionBook.complete_head
<ingest.transactions.book.TransactionBook.complete_head>` of the tasks' merged masks: in the
benchmark ~20,000 transactions a batch, nearly every one of them in the head. Asked of the
book's states and a dict of the masks, that was a Python loop over both after a dict of every
reported transaction was built, ~10 ms on the batch's critical path between its tasks and its
commit. Here the END-known transactions are columns built with the batch's start (before its
tasks, off that path: :class:`EndedColumns`), the tasks' masks stay in numpy - nearly all of
them come by the candidate's position in the columns (``ingest.sink.report.merged_placed``),
the few others by id (``merged_union``) - and only the transactions outside the head become
a dict, for the book's steps that follow.

Columns hold 64-bit masks: they stop at the first transaction that does not fit them (an END
without counts, a rank past 63 - the book's own loop goes on from there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.transactions.book import TxnState

__all__ = ["EndedColumns"]

#: The highest rank a column's mask holds (bit n for rank n, in 64 bits).
_TOP_RANK = 63
_WORD = 1 << 64


def _fits(states: tuple[TxnState, ...]) -> int:
    """How many of ``states``, from the first, columns hold: END counts known, every rank at
    most 63 (a transaction's total is the number of its events)."""
    for at, state in enumerate(states):
        total = state.total
        if state.expected is None or state.seen >= _WORD or total is None or total > _TOP_RANK:
            return at
    return len(states)


@dataclass(frozen=True)
class EndedColumns:
    """The END-known transactions of a book as columns, in commit order: for each, its id, the
    ranks seen before the batch, the ranks that count (1..``total``) and how many must be seen.
    ``states`` is the book's tuple they were built from (a caller checks it is still its
    book's, by identity)."""

    states: tuple[TxnState, ...]
    ids: pa.Array
    seen: np.ndarray
    valid: np.ndarray
    need: np.ndarray

    @classmethod
    def of(cls, states: tuple[TxnState, ...]) -> EndedColumns:
        """Columns of ``states`` up to the first that does not fit them. Built a field at a
        time, checked in C (~4 ms for 20,000 states, half of a loop over the states)."""
        ids = [t.id for t in states]
        seen = [t.seen for t in states]
        totals = [t.total for t in states]
        need = [t.expected for t in states]
        fits = None not in totals and None not in need
        if fits:
            fits = max(cast(list[int], totals), default=0) <= _TOP_RANK
            fits = fits and max(seen, default=0) < _WORD
        if not fits:
            cut = _fits(states)
            ids, seen, totals, need = ids[:cut], seen[:cut], totals[:cut], need[:cut]
        return cls(
            states,
            pa.array(ids, pa.string()),
            np.array(seen, np.uint64),
            (np.uint64(2) << np.array(totals, np.uint64)) - np.uint64(2),  # 2 << 63 wraps to 0
            np.array(need, np.int64),
        )

    @classmethod
    def joined(cls, states: tuple[TxnState, ...], parts: Sequence[EndedColumns]) -> EndedColumns:
        """Columns of ``states`` from the columns of its parts (``states`` is their states one
        after the other): what :meth:`of` gives, without a pass over the states. A part that
        stops early (a transaction that does not fit) is the last one taken."""
        taken: list[EndedColumns] = []
        for part in parts:
            taken.append(part)
            if len(part) < len(part.states):
                break
        if not taken:
            return cls.of(states)
        return cls(
            states,
            pa.concat_arrays([part.ids for part in taken]),
            np.concatenate([part.seen for part in taken]),
            np.concatenate([part.valid for part in taken]),
            np.concatenate([part.need for part in taken]),
        )

    def __len__(self) -> int:
        return len(self.ids)

    def split(
        self,
        positions: np.ndarray,
        placed: np.ndarray,
        ids: pa.Array,
        masks: np.ndarray,
        candidates: Sequence[str],
    ) -> tuple[int, dict[str, int]]:
        """The complete head with the batch's masks added, as far as the columns go; and the
        masks of every transaction outside that head, as a dict. The masks come by position
        (``placed[i]`` for candidate ``positions[i]``, a position maybe more than once: the
        candidates are the first of these columns, in ``candidates``' order) and by id
        (``masks[i]`` for transaction ``ids[i]``, each id once).

        The head stops at the first incomplete transaction or at the columns' end; when it
        is :func:`len` of these columns, the book's transactions after them may complete it
        further (:meth:`TransactionBook.complete_head` with ``start``)."""
        width = len(self.ids)
        found = np.zeros(width + 1, np.uint64)  # the last: candidates past the columns
        np.bitwise_or.at(found, np.minimum(positions, width), placed)
        at = pc.index_in(self.ids, value_set=ids).fill_null(-1).to_numpy()
        found[:width] |= np.append(masks, np.uint64(0))[at]  # -1: none reported, the 0
        counts = np.bitwise_count((self.seen | found[:width]) & self.valid)
        short = np.flatnonzero(counts < self.need)
        head = int(short[0]) if len(short) else width
        outside = np.ones(len(ids), bool)
        taken = at[:head]
        outside[taken[taken >= 0]] = False
        rest = dict(zip(ids.filter(outside).to_pylist(), masks[outside].tolist(), strict=True))
        later = positions >= head
        if later.any():  # candidates outside the head: by id, or-ed with what came by id
            union = np.zeros(len(candidates), np.uint64)
            np.bitwise_or.at(union, positions[later], placed[later])
            for position in np.flatnonzero(union).tolist():
                txn = candidates[position]
                rest[txn] = rest.get(txn, 0) | int(union[position])
        return head, rest
