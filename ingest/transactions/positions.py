"""Where each END-known transaction of a book stands in commit order, indexed in parts: what the
frontier (:meth:`TransactionBook.frontier_candidates
<ingest.transactions.book.TransactionBook.frontier_candidates>`) asks of them.

The frontier looks up the transactions of a few tails (a dozen ids) and finds the first
transaction in commit order that some partition has not passed: the limit depends only on the
data collections it touches, and a batch's tens of thousands of transactions touch a handful of
combinations. A loop over every state did that, after a dict of every id: ~5.5 ms for 20,000
transactions, between two batches, where the driver's time costs the most. Indexed, the lookups
are a dict probe and the first transaction past its limit a binary search per combination.

A book's END-known transactions are the ones it kept from its last commit, then the batch's
new ones, which the read-ahead reads (and indexes, :meth:`EndedPart.of`) while the batch before
runs its tasks: an :class:`EndedIndex` joins the parts without touching their states again.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ingest.transactions.book import TxnState

__all__ = ["EndedIndex", "EndedPart"]


@dataclass(frozen=True)
class EndedPart:
    """A run of END-known transactions (in commit order): their ids, where each id stands (its
    last place, as a dict of them would keep it) and, per combination of data collections
    (``TxnState.touched``), the places of the transactions touching exactly those."""

    states: Sequence[TxnState]
    ids: list[str]
    places: dict[str, int]
    shapes: dict[tuple[str, ...], list[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, states: Sequence[TxnState]) -> EndedPart:
        ids = [state[0] for state in states]
        shapes: dict[tuple[str, ...], list[int]] = {}
        for place, state in enumerate(states):
            touched = state.touched
            found = shapes.get(touched)
            if found is None:
                shapes[touched] = [place]
            else:
                found.append(place)
        return cls(states, ids, {txn: place for place, txn in enumerate(ids)}, shapes)

    def __len__(self) -> int:
        return len(self.ids)


class EndedIndex:
    """A book's END-known transactions (:attr:`states`, the book's tuple, in commit order) as
    the parts they were indexed in, one after the other."""

    def __init__(self, states: tuple[TxnState, ...], parts: Sequence[EndedPart]) -> None:
        if len(states) != sum(len(part) for part in parts):
            raise ValueError(f"{len(states)} states, parts of {[len(p) for p in parts]}")
        self.states = states
        self.parts = tuple(parts)
        starts, at = [], 0
        for part in self.parts:
            starts.append(at)
            at += len(part)
        self._starts = starts

    @classmethod
    def of(cls, states: tuple[TxnState, ...]) -> EndedIndex:
        return cls(states, [EndedPart.of(states)])

    def place(self, txn: str) -> float:
        """Where ``txn`` stands (its last place); infinity where it is not END-known."""
        for part, start in zip(reversed(self.parts), reversed(self._starts), strict=True):
            found = part.places.get(txn)
            if found is not None:
                return start + found
        return math.inf

    def first_past(self, limit: Callable[[tuple[str, ...]], float]) -> int:
        """The first place ``i`` at or past ``limit(touched)`` of the transaction standing
        there; how many there are if none is."""
        first = len(self.states)
        limits: dict[tuple[str, ...], float] = {}
        for part, start in zip(self.parts, self._starts, strict=True):
            if start >= first:
                break
            for touched, places in part.shapes.items():
                bound = limits.get(touched)
                if bound is None:
                    bound = limits[touched] = limit(touched)
                if bound == math.inf:
                    continue
                at = bisect.bisect_left(places, max(bound - start, 0))
                if at < len(places):
                    first = min(first, start + places[at])
        return first

    def ids_before(self, end: int) -> tuple[str, ...]:
        """The ids of the first ``end`` transactions, in order."""
        out: list[str] = []
        for part in self.parts:
            if len(out) >= end:
                break
            out += part.ids[: end - len(out)]
        return tuple(out)
