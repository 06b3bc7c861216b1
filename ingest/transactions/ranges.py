"""Sets of event ranks (``total_order``) as sorted disjoint inclusive ranges.

A transaction's events arrive in any order across partitions and batches, some twice (a replayed
range, a producer retry). Ranges count each rank once and stay a few pairs long, because the
events of one partition arrive in order: the book stores them in the catalog with each commit.
"""

from __future__ import annotations

from collections.abc import Iterable

Ranges = tuple[tuple[int, int], ...]


def ranges_of(orders: Iterable[int]) -> Ranges:
    """The ranges covering ``orders`` (any order, duplicates allowed)."""
    out: list[tuple[int, int]] = []
    for n in sorted(set(orders)):
        if out and out[-1][1] + 1 == n:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return tuple(out)


def merge(a: Ranges, b: Ranges) -> Ranges:
    """The union of two range sets."""
    if not a:
        return b
    if not b:
        return a
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(a + b):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return tuple(out)


def count(ranges: Ranges, upto: int | None = None) -> int:
    """How many ranks ``ranges`` holds, only those in ``1..upto`` when ``upto`` is given."""
    if len(ranges) == 1:  # the common case: every event of a transaction seen, in order
        lo, hi = ranges[0]
        if upto is not None:
            lo, hi = max(lo, 1), min(hi, upto)
        return max(0, hi - lo + 1)
    if upto is None:
        return sum(hi - lo + 1 for lo, hi in ranges)
    return sum(max(0, min(hi, upto) - max(lo, 1) + 1) for lo, hi in ranges)
