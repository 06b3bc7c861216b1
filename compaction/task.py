"""What the compactor hands from planning to rewriting, and what a rewrite reports back.

The coordinator plans :class:`CompactionTask` values from the catalog's latest snapshots, the
queue stores them, a worker runs :func:`compaction.rewrite.compact` on one and records the
:class:`CompactionOutcome`. Both sides meet only through these types, so the planner, the queue,
the service and ``lakestream tables compact`` all run the one routine.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from catalog import DataFile, IdempotencyKey

#: Writer ids of compaction commits start with this, so history and leftovers show who wrote them.
COMPACTOR_WRITER_PREFIX = "compactor:"


class CompactionKind(StrEnum):
    BIN_PACK = "bin-pack"
    """Append table: concatenate small files of one partition into files of the target size."""
    MERGE_BUCKET = "merge-bucket"
    """CDC table: fold the sorted runs of one bucket into one key-sorted file."""
    RESOLVE = "resolve"
    """CDC table: mark, with deletion vectors, the rows a bucket's pending runs replace, and flag
    the runs resolved; no data is rewritten (docs/design/deletion-vectors.md, D4). The inputs
    are every file of the bucket, in chain order."""
    FOLD_RESOLVED = "fold-resolved"
    """CDC table, tiers 1 and 2 of design D8: consecutive resolved files of one bucket (tier 1:
    small ones; tier 2: one file whose vector marks too many rows) rewritten as resolved files,
    marked rows dropped: one of live rows, one of tombstones (marked by its own vector). The
    inputs are that stretch; the commit names every file of the bucket, the output in the
    stretch's place. A kind of its own, not a mode of the fold: its inputs, read and commit
    all differ, and its bytes are told apart in the write-amplification figures."""


class OutcomeStatus(StrEnum):
    COMMITTED = "committed"
    """The compaction landed (possibly reordered before concurrent appends or merges)."""
    DISCARDED = "discarded"
    """A compaction or update landed first; ours was a no-op and its outputs are cleaned up."""
    REPLAN = "replan"
    """Our inputs are no longer in the snapshot; nothing landed; plan again next round."""
    ALREADY_DONE = "already-done"
    """The task's commit had already landed (a re-claimed task whose first worker died late)."""


@dataclass(frozen=True)
class CompactionTask:
    """One unit of compaction work: some files of one leaf partition, planned at one version."""

    table: str
    """Qualified name, ``namespace.table``."""
    table_id: uuid.UUID
    """The table incarnation planned against; a recreated table of the same name is another."""
    partition_desc: str
    """The leaf partition, bucket included for CDC tables (``date=...,bucket=0003``)."""
    kind: CompactionKind
    base_version: int
    """The table version the inputs were read at; the commit's base for conflict resolution."""
    inputs: tuple[DataFile, ...]
    """In commit order (oldest run first) - the order merge-on-read applies them in."""
    drop_deletes: bool = False
    """CDC only: the inputs are every file of the bucket at ``base_version``, so no older run can
    hold a key a delete must still hide, and deletes can be dropped from the output. For
    ``fold-resolved``: the stretch starts at the bucket's oldest file of a table without a
    sequence column (nothing older to hide, and every later change wins over a delete)."""
    target_file_size: int = 128 * 1024 * 1024
    task_id: uuid.UUID | None = None
    """Set by the queue; gives the commit a stable idempotency key across re-claims."""

    def key(self) -> IdempotencyKey:
        """The commit key: one per task, so a re-run of a landed task is recognised."""
        if self.task_id is None:
            return IdempotencyKey.anonymous()
        return IdempotencyKey(writer_id=f"{COMPACTOR_WRITER_PREFIX}{self.task_id}", batch_id=0)

    @property
    def input_bytes(self) -> int:
        return sum(f.size_bytes for f in self.inputs)

    @property
    def input_rows(self) -> int:
        """Live rows: those an input's deletion vector marks are not read into the outputs."""
        return sum(f.row_count - (f.vector.cardinality if f.vector else 0) for f in self.inputs)


@dataclass(frozen=True)
class CompactionOutcome:
    task: CompactionTask
    status: OutcomeStatus
    version: int | None
    """The table version the compaction landed as (COMMITTED / ALREADY_DONE)."""
    outputs: tuple[DataFile, ...]
    rows_in: int
    rows_out: int
    bytes_in: int
    bytes_out: int
    duration_s: float
    detail: str = ""
    """Why it was discarded or must be replanned (the winning commit, the missing input)."""
    figures: Mapping[str, int] = field(default_factory=dict)
    """What a resolve did (runs resolved, rows marked, vector bytes, index rows), for its log
    line; empty for the other kinds."""
