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
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

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


def _check_relative(value: str) -> str:
    if value.startswith("/") or ".." in value.split("/") or "\\" in value:
        raise ValueError(f"data file path must be relative to the table location: {value!r}")
    return value


class VectorRef(_Frozen):
    """Where a data file's deletion vector lives (docs/design/deletion-vectors.md, D2).

    A vector is a ``deletion-vector-v1`` blob (:mod:`catalog.files.vectors`): either small
    enough to ride in the file's catalog entry (``inline``, base64), or a byte range of a Puffin
    vector file under the table location (``path``, ``offset``, ``length``). ``cardinality``
    (positions marked) is kept in both forms so a planner can weigh a file's deleted fraction
    without reading the vector.
    """

    cardinality: int = Field(ge=0)
    inline: str | None = None
    path: str | None = None
    offset: int | None = Field(default=None, ge=0)
    length: int | None = Field(default=None, gt=0)

    @field_validator("path")
    @classmethod
    def _relative_path(cls, value: str | None) -> str | None:
        return None if value is None else _check_relative(value)

    @model_validator(mode="after")
    def _one_form(self) -> VectorRef:
        in_file = (self.path, self.offset, self.length)
        if self.inline is not None and any(v is not None for v in in_file):
            raise ValueError("a vector is either inline or in a file, not both")
        if self.inline is None and any(v is None for v in in_file):
            raise ValueError("a vector needs inline bytes, or a path, offset and length")
        return self

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        # the form not taken stays out of the entry: catalog rows and manifests carry it
        return {k: v for k, v in handler(self).items() if v is not None}


#: Fields a file entry carries only when set, so entries written before them (migration 0012)
#: and entries that do not use them serialise byte for byte as before.
_OPTIONAL_ENTRY_FIELDS = ("vector", "resolved")


class DataFile(_Frozen):
    """One immutable Parquet file of a table, as recorded in the catalog.

    ``path`` is relative to the table location so that a table can be moved or mounted elsewhere.

    ``vector`` marks rows of the file that no longer count (a deletion vector); ``resolved``
    says whether the rows a CDC run replaces in older files have been marked (see
    docs/design/deletion-vectors.md, D2 and D3). Both are optional and absent from entries that
    do not set them. Only reset ops (``compaction``, ``update``) may set them, and no writer
    does yet; every reader reads a file minus the rows its vector marks. ``row_count`` stays the
    rows the file holds as written.
    """

    path: str = Field(min_length=1)
    size_bytes: int = Field(ge=0)
    row_count: int = Field(ge=0)
    schema_id: int = Field(default=0, ge=0)
    stats: dict[str, ColumnStats] = Field(default_factory=dict)
    vector: VectorRef | None = None
    resolved: bool | None = None

    @field_validator("path")
    @classmethod
    def _relative_path(cls, value: str) -> str:
        return _check_relative(value)

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        out: dict[str, object] = handler(self)
        for name in _OPTIONAL_ENTRY_FIELDS:
            if out.get(name) is None:
                out.pop(name, None)
        return out

    @property
    def paths(self) -> tuple[str, ...]:
        """The files this entry names: its data file, and its vector file if it has one (they
        live and die together: expiry, vacuum and cleanup lists take both)."""
        if self.vector is not None and self.vector.path is not None:
            return (self.path, self.vector.path)
        return (self.path,)


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
