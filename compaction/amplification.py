"""Write amplification (design D8): bytes compaction wrote / bytes ingest added, per table.

Both figures come from the catalog's version summaries over a window of versions (the last
hour before the newest by default, :meth:`catalog.Table.bytes_by_op`), so anyone who reads the
catalog computes the same figure - the coordinator for its gauge, ``lakestream compactor
status``, the benchmarks. The numerator is ``summary.bytes_written`` of ``compaction`` versions:
the data files and vectors a task wrote, never the files a resolve names again (their full size
is in ``bytes_added``, which would make a resolve look as costly as a fold). The denominator is
``bytes_added`` of ``append`` and ``merge`` versions: what writers brought in. DML (``update``)
counts on neither side.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass

from catalog import CommitOp, OpBytes, Table

WINDOW = dt.timedelta(hours=1)
INGEST_OPS = (CommitOp.APPEND, CommitOp.MERGE)


@dataclass(frozen=True)
class WriteAmplification:
    """One table's figures over a window of versions."""

    compaction_bytes_written: int
    ingest_bytes_added: int

    @property
    def ratio(self) -> float | None:
        """Compaction bytes written per ingested byte; None when nothing was ingested."""
        if not self.ingest_bytes_added:
            return None
        return self.compaction_bytes_written / self.ingest_bytes_added

    @classmethod
    def of(cls, by_op: Mapping[CommitOp, OpBytes]) -> WriteAmplification:
        compaction = by_op.get(CommitOp.COMPACTION)
        return cls(
            compaction_bytes_written=compaction.bytes_written if compaction else 0,
            ingest_bytes_added=sum(by_op[op].bytes_added for op in INGEST_OPS if op in by_op),
        )


def write_amplification(table: Table, window: dt.timedelta = WINDOW) -> WriteAmplification:
    """The table's figures over the versions committed within ``window`` of its newest."""
    return WriteAmplification.of(table.bytes_by_op(window))
