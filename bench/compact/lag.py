"""Compaction lag: from a commit to the compaction versions that fold it, read from the catalog.

A CDC compaction task takes every run of one bucket at its ``base_version`` (the planner's
rule), so a compaction of bucket ``b`` landing at time ``T`` with base ``B`` folds every run an
upsert of version ``<= B`` wrote into ``b``. An upsert is folded once each bucket it touched has
had such a compaction; its lag is that moment minus its own commit time (both on the catalog's
clock). Which bucket a compaction version touched is the partition whose version moved between
the table versions ``V - 1`` and ``V`` (a compaction task is one bucket); its base is in the
version's summary.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from catalog import CommitOp, Table


@dataclass(frozen=True)
class Upsert:
    """What the writer learnt from one upsert's commit."""

    version: int
    committed_at: dt.datetime
    buckets: tuple[str, ...]


@dataclass(frozen=True)
class Compaction:
    version: int
    base_version: int
    committed_at: dt.datetime
    bucket: str
    rows_out: int


@dataclass(frozen=True)
class Lag:
    seconds: float | None
    """None: not folded by the end of the run."""
    commits: int | None
    """Upserts that landed after this one before it was folded."""


def compactions(table: Table) -> list[Compaction]:
    """Every landed compaction of the table, oldest first, with its bucket and base."""
    history = table.history(limit=10**9)
    found = []
    for entry in sorted(history, key=lambda h: h.version):
        if entry.op is not CommitOp.COMPACTION or not entry.summary.get("partitions"):
            continue
        before = {
            p.partition_desc: p.version for p in table.plan(version=entry.version - 1).partitions
        }
        after = table.plan(version=entry.version).partitions
        for part in after:
            if before.get(part.partition_desc) != part.version:
                found.append(
                    Compaction(
                        version=entry.version,
                        base_version=int(entry.summary["base_version"]),
                        committed_at=entry.committed_at,
                        bucket=part.partition_desc,
                        rows_out=entry.rows_added,
                    )
                )
    return found


def lags(upserts: Sequence[Upsert], folds: Sequence[Compaction]) -> list[Lag]:
    """Per upsert, the time (and the upserts) until every bucket it touched was compacted."""
    by_bucket: dict[str, list[Compaction]] = {}
    for c in sorted(folds, key=lambda c: c.committed_at):
        by_bucket.setdefault(c.bucket, []).append(c)
    reach = {b: _running_max([c.base_version for c in cs]) for b, cs in by_bucket.items()}
    times = sorted(u.committed_at for u in upserts)
    out = []
    for i, upsert in enumerate(upserts):
        folded: dt.datetime | None = upsert.committed_at
        for bucket in upsert.buckets:
            at = bisect.bisect_left(reach.get(bucket, []), upsert.version)
            if at == len(reach.get(bucket, [])):
                folded = None
                break
            when = by_bucket[bucket][at].committed_at
            folded = max(folded, when) if folded is not None else None
        if folded is None:
            out.append(Lag(None, None))
            continue
        later = bisect.bisect_right(times, folded) - (i + 1)
        out.append(Lag((folded - upsert.committed_at).total_seconds(), max(0, later)))
    return out


def _running_max(values: Sequence[int]) -> list[int]:
    """Non-decreasing: the highest base folded so far, in landing order (bisect-able)."""
    out, top = [], -1
    for v in values:
        top = max(top, v)
        out.append(top)
    return out
