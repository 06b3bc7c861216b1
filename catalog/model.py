"""Catalog entities and commit requests: the typed vocabulary shared by every engine.

Everything here is frozen and JSON-serialisable, because these objects travel: file metadata is
produced on Spark executors and sent to the driver, commit requests are retried and replayed, and
commit rows are stored as JSON in PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import uuid
from enum import StrEnum

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Name of the row-kind column every merge-run file of a CDC table carries.
ROW_KIND_COLUMN = "_ls_kind"
#: Row kinds stored in :data:`ROW_KIND_COLUMN` (int8): the last change of a key wins.
ROW_KIND_UPSERT = 0
ROW_KIND_DELETE = 1
#: Source-position column of CDC tables fed by ingest (fixed 16 bytes, byte order = source
#: order); such tables name it as their sequence column, so replays never regress a key.
SEQUENCE_COLUMN = "_ls_seq"
#: Optional column of merge-run files: per row, the columns a *partial* change left out
#: (list<string>; null for a complete row). Merges fill them from the key's previous change;
#: see :mod:`catalog.files.partial`.
UNSET_COLUMN = "_ls_unset"
UNSET_TYPE = pa.list_(pa.string())
#: Bucket number of tables that are unaware of buckets (append tables, Paimon's bucket = -1).
UNAWARE_BUCKET = -1

#: A statistics value as stored in the catalog (JSON); readers cast it back to the column's type.
StatValue = int | float | str | bool | None


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CommitOp(StrEnum):
    """What a commit does to a partition; decides how concurrent commits are resolved."""

    APPEND = "append"
    COMPACTION = "compaction"
    UPDATE = "update"
    MERGE = "merge"

    @property
    def resets_snapshot(self) -> bool:
        """Compaction and update describe the whole partition; append and merge add to it."""
        return self in (CommitOp.COMPACTION, CommitOp.UPDATE)


class FileAction(StrEnum):
    ADD = "add"
    DELETE = "del"


class ColumnStats(_Frozen):
    """Per-column statistics of one data file, used to prune files at read time."""

    min: StatValue = None
    max: StatValue = None
    null_count: int = 0


class DataFile(_Frozen):
    """One immutable Parquet file of a table, as recorded in the catalog.

    ``path`` is relative to the table location so that a table can be moved or mounted elsewhere.
    """

    path: str = Field(min_length=1)
    size_bytes: int = Field(ge=0)
    row_count: int = Field(ge=0)
    schema_id: int = Field(default=0, ge=0)
    stats: dict[str, ColumnStats] = Field(default_factory=dict)

    @field_validator("path")
    @classmethod
    def _relative_path(cls, value: str) -> str:
        if value.startswith("/") or ".." in value.split("/") or "\\" in value:
            raise ValueError(f"data file path must be relative to the table location: {value!r}")
        return value


class FileOp(_Frozen):
    action: FileAction
    file: DataFile


class PartitionCommit(_Frozen):
    """The file operations of one commit in one leaf partition."""

    partition_desc: str
    ops: tuple[FileOp, ...]

    @property
    def added(self) -> tuple[DataFile, ...]:
        return tuple(op.file for op in self.ops if op.action is FileAction.ADD)

    @property
    def deleted(self) -> tuple[DataFile, ...]:
        return tuple(op.file for op in self.ops if op.action is FileAction.DELETE)


class TableCommit(_Frozen):
    """One table's part of a catalog commit.

    ``base_version`` is the table version the work was planned against (the version the writer
    read). Commits that landed after it are the concurrent ones resolved by the conflict matrix.
    ``None`` means the work did not depend on the table's state (a blind append or merge run).
    """

    table: str
    op: CommitOp
    partitions: tuple[PartitionCommit, ...]
    base_version: int | None = None
    evolve_to: str | None = None
    """A new table schema (base64 of its Arrow IPC bytes) published in this same commit, e.g.
    a column the source added; validated by the schema evolution rules under the table lock."""

    @field_validator("partitions")
    @classmethod
    def _distinct_partitions(
        cls, value: tuple[PartitionCommit, ...]
    ) -> tuple[PartitionCommit, ...]:
        descs = [p.partition_desc for p in value]
        if len(descs) != len(set(descs)):
            raise ValueError("a table commit names the same partition twice")
        return value


_ANONYMOUS_PREFIX = "anon-"


class IdempotencyKey(_Frozen):
    """(writer id, batch id): the same key committed twice yields the first commit."""

    writer_id: str = Field(min_length=1, max_length=200)
    batch_id: int = Field(ge=0)

    @classmethod
    def anonymous(cls) -> IdempotencyKey:
        return cls(writer_id=f"{_ANONYMOUS_PREFIX}{uuid.uuid4()}", batch_id=0)

    @property
    def is_anonymous(self) -> bool:
        return self.writer_id.startswith(_ANONYMOUS_PREFIX)


class SourcePoint(_Frozen):
    """A point of a source's log up to which the lake holds every source transaction, whole.

    ``position`` is the 16-byte source position of :data:`SEQUENCE_COLUMN` as hex (so points of
    one source compare like strings of equal length); ``source_time`` is the source's commit time
    there; ``transaction`` the id of the last transaction published up to it, if the source names
    its transactions."""

    position: str = Field(pattern=r"^[0-9a-f]{32}$")
    source_time: dt.datetime | None = None
    transaction: str | None = None


class SourceWatermark(_Frozen):
    """How far a commit makes the lake transaction-consistent with its source.

    Written by an ingest job in ``transactions: consistent`` mode: ``batch`` for the commit as a
    whole, ``tables`` per target table (a table the commit did not touch is consistent up to the
    batch point too, because nothing of it was held back). ``exceptions`` names the transactions
    this commit published incomplete (``on_timeout: publish``): the commit is then not a
    consistent cut, and says so."""

    batch: SourcePoint
    tables: dict[str, SourcePoint] = Field(default_factory=dict)
    exceptions: tuple[str, ...] = ()

    @property
    def consistent(self) -> bool:
        return not self.exceptions


class CommitRequest(_Frozen):
    """Everything one atomic catalog commit carries, over one or several tables."""

    tables: tuple[TableCommit, ...] = Field(min_length=1)
    key: IdempotencyKey = Field(default_factory=IdempotencyKey.anonymous)
    #: Source positions (e.g. Kafka offsets), stored as the writer's progress in the same
    #: transaction.
    source_offsets: dict[str, object] | None = None
    #: Under which name the progress is stored (default: the key's writer id). A streaming job
    #: keeps one name for its progress while its keys change with each checkpoint incarnation.
    progress_key: str | None = None
    #: Whether the commit is the writer's progress (``writer_progress``). A one-off writer (a
    #: compaction task) says no: nobody resumes from it, and a progress row would pin its
    #: idempotency key against snapshot expiry forever.
    record_progress: bool = True
    #: Up to where the commit makes the tables transaction-consistent with the source; stored
    #: in each written table's version and in the writer's progress.
    source_watermark: SourceWatermark | None = None
    #: A streaming writer's own state (e.g. its transaction bookkeeping), stored with its
    #: progress in the same transaction, so a restart resumes from the catalog alone.
    job_state: dict[str, object] | None = None


class TableCommitResult(_Frozen):
    table: str
    table_id: uuid.UUID
    version: int | None
    """The table version this commit created; ``None`` if it was discarded."""
    discarded: bool = False
    partition_versions: dict[str, int] = Field(default_factory=dict)


class CommitResult(_Frozen):
    commit_id: uuid.UUID
    key: IdempotencyKey
    committed_at: dt.datetime
    tables: tuple[TableCommitResult, ...]
    #: True when this key had been committed before and this call returned that first commit.
    replayed: bool = False
    attempts: int = 1

    def version_of(self, table: str) -> int | None:
        for result in self.tables:
            if result.table == table:
                return result.version
        raise KeyError(table)
