"""Sets of event ranks (``total_order``): as bit masks in memory, as sorted disjoint inclusive
ranges when stored.

A transaction's events arrive in any order across partitions and batches, some twice (a replayed
range, a producer retry). Both forms count each rank once; ranges stay a few pairs long, because
the events of one partition arrive in order: the book stores them in the catalog with each commit.
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


# -- as bit masks: bit n set <=> rank n seen ----------------------------------------------------
#
# The book and the tasks' reports keep ranks as Python ints used as bit sets: a union is one
# ``|``, a count one ``bit_count``, both in C, where merging tuples of ranges cost microseconds
# a transaction in Python. Ranges stay the stored form (compact for huge transactions, and a
# JSON number in PostgreSQL's jsonb could not hold a mask of a million bits).

#: The greatest rank a transaction may have: a mask of it is 32 MiB. A greater ``total_order``
#: is taken as a malformed block (a corrupt record must not make a task allocate gigabytes).
MAX_RANK = 1 << 28
#: Ranks up to this are set bit by bit; a transaction with greater ones goes through ranges
#: (one shift per range instead of one per rank on an ever wider int).
BITWISE_LIMIT = 4096


def mask_of(orders: Iterable[int]) -> int:
    """The mask of ``orders`` (any order, duplicates allowed)."""
    ranks = orders if isinstance(orders, list) else list(orders)
    if ranks and max(ranks) > BITWISE_LIMIT:
        return to_mask(ranges_of(ranks))
    mask = 0
    for n in ranks:
        mask |= 1 << n
    return mask


def to_mask(ranges: Ranges) -> int:
    """The mask of a range set."""
    mask = 0
    for lo, hi in ranges:
        mask |= ((1 << (hi - lo + 1)) - 1) << lo
    return mask


def from_mask(mask: int) -> Ranges:
    """The range set of a mask (runs of set bits, found by C's string search, not bit by bit)."""
    bits = bin(mask)[:1:-1]  # bit 0 first
    out: list[tuple[int, int]] = []
    start = bits.find("1")
    while start >= 0:
        stop = bits.find("0", start)
        stop = len(bits) if stop < 0 else stop
        out.append((start, stop - 1))
        start = bits.find("1", stop)
    return tuple(out)


def count_mask(mask: int, upto: int | None = None) -> int:
    """How many ranks ``mask`` holds, only those in ``1..upto`` when ``upto`` is given."""
    if upto is None:
        return mask.bit_count()
    return (mask & ((2 << upto) - 2)).bit_count()
