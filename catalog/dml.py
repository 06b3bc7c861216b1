"""Batch DELETE and UPDATE by predicate: one statement, one commit, on both table kinds.

A statement is a conjunction of :class:`~catalog.files.pruning.Predicate` (``where``) and, for
an UPDATE, column assignments (``set``). It is evaluated on one table version, written, and
committed against that version; the conflict matrix then decides:

* **Append tables - deletion vectors.** Only files whose statistics may hold a match are read
  (partition values and per-file min/max/null counts prune first), and of those only the
  predicate columns, as written: a match's position counts every row of the file, and a row the
  file's vector already marks never matches again. Each file holding a match is named again in
  one ``update`` commit with a deletion vector = its old vector plus the new matches
  (docs/design/deletion-vectors.md, D2-D3); a file whose every row ends up marked is dropped
  instead. An UPDATE marks its matches the same way and writes them again, assigned, as new
  files (in their new partitions when a partition column is assigned). Vectors are written per
  partition, inline in the entry up to ``vectors.inline-max-bytes`` and otherwise in one Puffin
  vector file, before the commit like any data file (a lost commit deletes it). Why: the
  copy-on-write this replaced rewrote a whole file for one matching row, so a DELETE cost about
  the table's size in the files it touched; a vector costs a read of the predicate columns and
  a few bytes per marked row. What it costs instead: every reader applies vectors (they all go
  through :mod:`catalog.files.reader`, so DuckDB, Polars, Spark and the compactor do), a marked
  file leaves the readers' dataset fast path until a compaction rewrites it (append files past
  ``compaction.rewrite-deleted-ratio`` marked become rewrite candidates), and marked rows keep
  their bytes until then. ``dml.deletion-vectors: off`` keeps the old copy-on-write, for
  consumers that take data files whole and cannot apply vectors.
* **CDC tables - through the merge path.** The table is merge-read at the version (the key's
  newest change wins, partial rows filled), the predicate is applied to the winners, and the
  matching keys are written as merge runs: delete rows for a DELETE, complete rows with the
  assignments for an UPDATE (a partial winner keeps the columns it still lacks named, less the
  assigned ones). Each written change carries the source position (sequence column) of the row
  it replaces, so it wins over that row (ties go to the newer run) and loses to any later change
  of the source - a replayed older event can never undo a statement. An assignment to a
  partition column moves the key: a delete in its old partition, the row in its new one.

The statement's commit names the version it read (``base_version``). If an append or merge
landed in one of its partitions since (matrix: ``update``/``merge`` after ``append``/``merge``
fails), nothing of it lands: its files are deleted and it is evaluated again on the new version,
under a bounded, jittered :class:`~catalog.retry.RetryPolicy`. Two statements marking one
partition are two ``update``s: the later one fails and is evaluated again on the first one's
vectors, so no mark is lost. A compaction that landed since is overwritten by an append-table
statement (its snapshot is its base with its files named again or rewritten; the compaction's
outputs held the same rows) and rebased under a CDC statement; a compaction that lands after a
statement marked one of its inputs is discarded (its output was read minus the old vector). So
a statement never leaves a partial result: all of its partitions land in one commit, or none
does.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog.errors import (
    CatalogError,
    CatalogUnavailableError,
    CommitConflict,
    CommitRejected,
    ConflictKind,
    SchemaError,
)
from catalog.files.pruning import Predicate, may_contain, to_expression
from catalog.files.reader import read_file_as_written, read_files, read_merged_buckets
from catalog.files.vectors import VectorConfigError, inline_max_bytes, store_vectors
from catalog.files.writer import WriteOptions, write_data_files
from catalog.logs import get_logger
from catalog.meta import TableMeta
from catalog.model import (
    ROW_KIND_COLUMN,
    ROW_KIND_DELETE,
    ROW_KIND_UPSERT,
    UNAWARE_BUCKET,
    UNSET_COLUMN,
    CommitOp,
    CommitRequest,
    CommitResult,
    DataFile,
    FileAction,
    FileOp,
    IdempotencyKey,
    PartitionCommit,
    TableCommit,
    VectorRef,
)
from catalog.planning import PartitionScan
from catalog.retry import RetryPolicy
from catalog.scan import ScanFilter, partition_filter, values_may_match
from catalog.writes import (
    DEFAULT_WRITE_OPTIONS,
    changes,
    key_and_partition_columns,
    split_partitions,
    stage_changes,
)

if TYPE_CHECKING:
    from catalog.table import Table

log = get_logger("lakestream.catalog.dml")

#: Retries of a statement that lost to a concurrent append or merge. Each attempt re-reads and
#: rewrites, so the budget is larger in time than a plain commit's.
STATEMENT_RETRY = RetryPolicy(attempts=6, base_delay=0.05, max_delay=2.0, deadline=600.0)

WhereSpec = Sequence[Predicate | tuple[str, str, object] | tuple[str, str]]

#: Table property: ``on`` (default) - append-table statements mark rows with deletion vectors;
#: ``off`` - they rewrite every file holding a match (copy-on-write).
DELETION_VECTORS_PROPERTY = "dml.deletion-vectors"


class StatementError(CatalogError, ValueError):
    """A statement that cannot run as written (no predicate, an assignment to a key column).

    Nothing was read or written."""

    def __init__(self, message: str, *, table: str, column: str | None = None) -> None:
        super().__init__(message)
        self.table = table
        self.column = column


class StatementKind(StrEnum):
    DELETE = "delete"
    UPDATE = "update"


@dataclass(frozen=True)
class Statement:
    """A validated DELETE or UPDATE: predicates and typed assignment values."""

    kind: StatementKind
    where: tuple[Predicate, ...]
    assignments: Mapping[str, pa.Scalar] = field(default_factory=dict)

    @property
    def scan_filter(self) -> ScanFilter:
        return ScanFilter(predicates=self.where)


@dataclass(frozen=True)
class StatementResult:
    """What a statement did. ``version`` is None when no row matched (nothing was committed)."""

    table: str
    kind: StatementKind
    rows: int
    """Rows deleted or updated."""
    base_version: int
    version: int | None
    files_read: int
    """Candidate files read (after pruning by partition values and statistics)."""
    files_replaced: int
    """Append tables: files newly marked by a deletion vector, dropped (every row gone) or, with
    ``dml.deletion-vectors: off``, rewritten; CDC tables: 0 (runs are added)."""
    files_written: int
    """Data files written (an UPDATE's rows; copy-on-write rewrites); vector files not counted."""
    attempts: int
    commit: CommitResult | None = None
    vectors_written: int = 0
    """Append tables: files named again with a new deletion vector (inline or in a vector file)."""
    vector_files: int = 0
    """Vector (Puffin) files written for the vectors too large to be kept inline."""


def statement(
    meta: TableMeta,
    where: WhereSpec,
    assignments: Mapping[str, object] | None = None,
) -> Statement:
    """Validate a statement against the table: a predicate is required, every column must
    exist, assignments may not touch the primary key or the sequence column, and each value
    must fit its column (converted like a write would, never silently narrowed)."""
    table = str(meta.name)
    predicates = tuple(p if isinstance(p, Predicate) else Predicate(*p) for p in where)
    if not predicates:
        raise StatementError(
            "a statement needs at least one predicate (to delete everything, drop the table)",
            table=table,
        )
    for predicate in predicates:
        _check_column(meta, predicate.column)
    if assignments is None:
        return Statement(StatementKind.DELETE, predicates)
    if not assignments:
        raise StatementError("an update needs at least one assignment", table=table)
    typed = {name: _assigned_value(meta, name, value) for name, value in assignments.items()}
    return Statement(StatementKind.UPDATE, predicates, typed)


def _check_column(meta: TableMeta, column: str) -> pa.Field:
    index = meta.schema.get_field_index(column)
    if index < 0:
        raise SchemaError(
            f"column {column!r} is not in {meta.name}", table=str(meta.name), column=column
        )
    return meta.schema.field(index)


def _assigned_value(meta: TableMeta, name: str, value: object) -> pa.Scalar:
    table = str(meta.name)
    column = _check_column(meta, name)
    if name in meta.primary_key:
        raise StatementError(
            f"column {name!r} is part of the primary key of {table} and cannot be updated "
            "(delete the row and upsert it under its new key)",
            table=table,
            column=name,
        )
    if name == meta.sequence_column:
        raise StatementError(
            f"column {name!r} orders the changes of {table} and cannot be updated",
            table=table,
            column=name,
        )
    try:
        scalar = value if isinstance(value, pa.Scalar) else pa.scalar(value)
        if not scalar.type.equals(column.type):
            scalar = scalar.cast(column.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as exc:
        raise SchemaError(
            f"column {name!r} has type {column.type}; {value!r} does not fit it",
            table=table,
            column=name,
        ) from exc
    if not scalar.is_valid and not column.nullable:
        raise SchemaError(f"column {name!r} may not hold nulls", table=table, column=name)
    return scalar


# ----------------------------------------------------------------------------- staging


@dataclass(frozen=True)
class Staged:
    """A statement evaluated and written at one version; ``commit`` None: nothing matched."""

    commit: TableCommit | None
    rows: int
    files_read: int
    files_replaced: int
    written: tuple[DataFile, ...]
    vector_files: tuple[str, ...] = ()
    """Vector files written (relative paths): deleted with ``written`` if the commit is lost."""
    vectors: int = 0

    @property
    def paths(self) -> tuple[str, ...]:
        """Every file this attempt wrote: what a lost commit deletes."""
        return (*(f.path for f in self.written), *self.vector_files)


def stage(table: Table, stmt: Statement, base: int, options: WriteOptions) -> Staged:
    """Evaluate ``stmt`` on version ``base`` of ``table`` and write its files."""
    meta = table.meta
    plan = table.plan(version=base, partition_filter=partition_filter(meta, stmt.scan_filter))
    parts = [p for p in plan.partitions if values_may_match(meta, p.values, stmt.scan_filter)]
    if meta.is_cdc:
        return _stage_cdc(meta, stmt, parts, base, options)
    if uses_vectors(meta):
        return _stage_vectors(meta, stmt, parts, base, options)
    return _stage_append(meta, stmt, parts, base, options)


def uses_vectors(meta: TableMeta) -> bool:
    """Whether an append table's statements mark rows with deletion vectors
    (:data:`DELETION_VECTORS_PROPERTY`, ``on`` by default) or rewrite files (``off``).

    Raises:
        VectorConfigError: a value other than ``on`` or ``off``.
    """
    text = meta.properties.get(DELETION_VECTORS_PROPERTY, "on")
    value = text.strip().lower()
    if value not in ("on", "off"):
        raise VectorConfigError(
            f"{meta.name}: table property {DELETION_VECTORS_PROPERTY} must be on or off, "
            f"not {text!r}"
        )
    return value == "on"


def matching(rows: pa.Table, predicates: Sequence[Predicate], schema: pa.Schema) -> np.ndarray:
    """A boolean mask of the rows satisfying every predicate (SQL: a null never matches)."""
    expression = to_expression(predicates, schema)
    if expression is None or rows.num_rows == 0:
        return np.ones(rows.num_rows, dtype=np.bool_)
    columns = sorted({p.column for p in predicates})
    index = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    probe = pa.Table.from_arrays(
        [*(rows.column(c) for c in columns), index], names=[*columns, "__row"]
    )
    hits = probe.filter(expression).column("__row").to_numpy()
    mask = np.zeros(rows.num_rows, dtype=np.bool_)
    mask[hits] = True
    return mask


def assign(rows: pa.Table, mask: np.ndarray, assignments: Mapping[str, pa.Scalar]) -> pa.Table:
    """``rows`` with the assignments applied where ``mask`` holds; row order is kept."""
    where = pa.array(mask)
    for name, value in assignments.items():
        index = rows.schema.get_field_index(name)
        column = pc.if_else(where, value, rows.column(index))
        rows = rows.set_column(index, rows.schema.field(index), column)
    return rows


# -- append tables: deletion vectors ----------------------------------------------------------


@dataclass(frozen=True)
class _Marked:
    """One candidate file after a statement: the positions to mark (its old vector's and the
    new matches', file coordinates) and, for an UPDATE, its matched rows written again."""

    desc: str
    source: DataFile
    matched: int
    marks: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    outputs: tuple[tuple[str, tuple[DataFile, ...]], ...] = ()

    @property
    def dropped(self) -> bool:
        """Every row of the file is marked: it leaves the table instead of carrying a vector."""
        return len(self.marks) >= self.source.row_count


def _stage_vectors(
    meta: TableMeta,
    stmt: Statement,
    parts: Sequence[PartitionScan],
    base: int,
    options: WriteOptions,
) -> Staged:
    """Mark the matches of every candidate file, write the vectors (per partition: inline or
    one vector file) and an UPDATE's new rows; one ``update`` commit names each marked file
    again with its new vector (a DELETE and an ADD of the same path) or drops it."""
    candidates = [(p, f) for p in parts for f in p.files if may_contain(f, stmt.where, meta.schema)]
    inline_max = inline_max_bytes(meta.properties)
    done: list[_Marked] = []
    vector_files: list[str] = []
    try:
        workers = max(1, min(len(candidates), pa.cpu_count()))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lakestream-dml") as pool:
            done += pool.map(lambda pf: _mark(meta, stmt, pf[0], pf[1], options), candidates)
        marked = [m for m in done if m.matched]
        refs = _store(meta, marked, inline_max, vector_files)
    except BaseException:
        _remove_paths(meta, [f.path for m in done for _, fs in m.outputs for f in fs])
        _remove_paths(meta, vector_files)
        raise
    if not marked:
        return Staged(None, 0, len(candidates), 0, ())
    ops: dict[str, list[FileOp]] = defaultdict(list)
    for m in marked:
        ops[m.desc].append(FileOp(action=FileAction.DELETE, file=m.source))
        if not m.dropped:
            named = m.source.model_copy(update={"vector": refs[m.source.path]})
            ops[m.desc].append(FileOp(action=FileAction.ADD, file=named))
    for m in marked:
        for desc, files in m.outputs:
            ops[desc] += [FileOp(action=FileAction.ADD, file=f) for f in files]
    commit = TableCommit(
        table=str(meta.name),
        op=CommitOp.UPDATE,  # a reset op: only those may carry vectors (design D3)
        partitions=tuple(
            PartitionCommit(partition_desc=d, ops=tuple(o)) for d, o in sorted(ops.items())
        ),
        base_version=base,
    )
    written = tuple(f for m in marked for _, files in m.outputs for f in files)
    rows = sum(m.matched for m in marked)
    return Staged(
        commit, rows, len(candidates), len(marked), written, tuple(vector_files), len(refs)
    )


def _store(
    meta: TableMeta, marked: Sequence[_Marked], inline_max: int, vector_files: list[str]
) -> dict[str, VectorRef]:
    """The new vectors of the files that stay, per partition; the vector files written are
    appended to ``vector_files`` as they are written (a failure later still finds them)."""
    by_partition: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    for m in marked:
        if not m.dropped:
            by_partition[m.desc][m.source.path] = m.marks
    refs: dict[str, VectorRef] = {}
    for desc, vectors in sorted(by_partition.items()):
        values = list(meta.spec.parse(desc)[0].items())
        stored = store_vectors(
            meta.files, vectors, partition=values, bucket=UNAWARE_BUCKET, inline_max=inline_max
        )
        vector_files += sorted({r.path for r in stored.values() if r.path is not None})
        refs.update(stored)
    return refs


def _mark(
    meta: TableMeta, stmt: Statement, part: PartitionScan, file: DataFile, options: WriteOptions
) -> _Marked:
    """One candidate file: its matches found from the predicate columns alone, read as written
    (positions count every row of the file; rows its vector already marks never match again).
    An UPDATE reads the whole file only if something matched, and writes the matched rows with
    the assignments applied (into their new partitions when a partition column is assigned)."""
    wanted = sorted({p.column for p in stmt.where})
    probe, keep = read_file_as_written(meta.files, file, meta.schema, columns=wanted)
    mask = matching(probe, stmt.where, meta.schema) & keep
    matched = int(mask.sum())
    if matched == 0:
        return _Marked(part.partition_desc, file, 0)
    hits = np.flatnonzero(mask)
    marks = np.flatnonzero(~(keep & ~mask)).astype(np.uint64)  # old marks and new, sorted
    if stmt.kind is StatementKind.DELETE:
        return _Marked(part.partition_desc, file, matched, marks)
    rows, _ = read_file_as_written(meta.files, file, meta.schema)
    updated = assign(rows.take(pa.array(hits)), np.ones(matched, np.bool_), stmt.assignments)
    outputs: list[tuple[str, tuple[DataFile, ...]]] = []
    try:
        if any(c in meta.spec.columns for c in stmt.assignments):
            for piece in split_partitions(meta, updated):
                outputs.append((piece.desc, tuple(_write(meta, piece.values, piece.rows, options))))
        else:
            values = tuple(meta.spec.parse(part.partition_desc)[0].items())
            outputs.append((part.partition_desc, tuple(_write(meta, values, updated, options))))
    except BaseException:
        _remove(meta, [f for _, files in outputs for f in files])
        raise
    return _Marked(part.partition_desc, file, matched, marks, tuple(outputs))


# -- append tables: copy-on-write (dml.deletion-vectors: off) ----------------------------------


@dataclass(frozen=True)
class _Rewrite:
    desc: str
    source: DataFile
    matched: int
    outputs: tuple[tuple[str, tuple[DataFile, ...]], ...] = ()
    """Per partition written to (an update of a partition column moves rows): its new files."""


def _stage_append(
    meta: TableMeta,
    stmt: Statement,
    parts: Sequence[PartitionScan],
    base: int,
    options: WriteOptions,
) -> Staged:
    candidates = [(p, f) for p in parts for f in p.files if may_contain(f, stmt.where, meta.schema)]
    workers = max(1, min(len(candidates), pa.cpu_count()))
    done: list[_Rewrite] = []
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lakestream-dml") as pool:
            for result in pool.map(
                lambda pf: _rewrite(meta, stmt, pf[0], pf[1], options), candidates
            ):
                done.append(result)
    except BaseException:
        _remove(meta, [f for r in done for _, files in r.outputs for f in files])
        raise
    rewritten = [r for r in done if r.matched]
    written = tuple(f for r in rewritten for _, files in r.outputs for f in files)
    if not rewritten:
        return Staged(None, 0, len(candidates), 0, ())
    ops: dict[str, list[FileOp]] = defaultdict(list)
    for r in rewritten:
        ops[r.desc].append(FileOp(action=FileAction.DELETE, file=r.source))
    for r in rewritten:
        for desc, files in r.outputs:
            ops[desc] += [FileOp(action=FileAction.ADD, file=f) for f in files]
    commit = TableCommit(
        table=str(meta.name),
        op=CommitOp.UPDATE,
        partitions=tuple(
            PartitionCommit(partition_desc=d, ops=tuple(o)) for d, o in sorted(ops.items())
        ),
        base_version=base,
    )
    rows = sum(r.matched for r in rewritten)
    return Staged(commit, rows, len(candidates), len(rewritten), written)


def _rewrite(
    meta: TableMeta, stmt: Statement, part: PartitionScan, file: DataFile, options: WriteOptions
) -> _Rewrite:
    """One candidate file: find its matches from the predicate columns alone, and only if
    there are any read it whole and write it again."""
    wanted = sorted({p.column for p in stmt.where})
    probe = _read(meta, file, wanted)
    mask = matching(probe, stmt.where, meta.schema)
    matched = int(mask.sum())
    if matched == 0:
        return _Rewrite(part.partition_desc, file, 0)
    rows = _read(meta, file, None)
    if stmt.kind is StatementKind.DELETE:
        kept = rows.filter(pa.array(~mask))
    else:
        kept = assign(rows, mask, stmt.assignments)
    outputs: list[tuple[str, tuple[DataFile, ...]]] = []
    moves = any(c in meta.spec.columns for c in stmt.assignments)
    try:
        if kept.num_rows and moves:
            for piece in split_partitions(meta, kept):
                outputs.append((piece.desc, tuple(_write(meta, piece.values, piece.rows, options))))
        elif kept.num_rows:
            values = tuple(meta.spec.parse(part.partition_desc)[0].items())
            outputs.append((part.partition_desc, tuple(_write(meta, values, kept, options))))
    except BaseException:
        _remove(meta, [f for _, files in outputs for f in files])
        raise
    return _Rewrite(part.partition_desc, file, matched, tuple(outputs))


def _read(meta: TableMeta, file: DataFile, columns: Sequence[str] | None) -> pa.Table:
    schema = meta.schema if columns is None else pa.schema([meta.schema.field(c) for c in columns])
    batches = list(read_files(meta.files, [file], meta.schema, columns=columns))
    return pa.Table.from_batches(batches, schema=schema)


def _write(
    meta: TableMeta, values: Sequence[tuple[str, object]], rows: pa.Table, options: WriteOptions
) -> list[DataFile]:
    return write_data_files(
        rows,
        meta.files,
        partition=list(values),
        schema_id=meta.current_schema_id,
        field_ids=meta.field_ids,
        options=options,
    )


# -- CDC tables: delete and update runs ---------------------------------------------------------


def _stage_cdc(
    meta: TableMeta,
    stmt: Statement,
    parts: Sequence[PartitionScan],
    base: int,
    options: WriteOptions,
) -> Staged:
    found = list(_cdc_changes(meta, stmt, parts))
    rows = sum(n for n, _ in found)
    if rows == 0:
        return Staged(None, 0, sum(len(p.files) for p in parts), 0, ())
    changed = pa.concat_tables([t for _, t in found], promote_options="default")
    commit = stage_changes(meta, changes(meta, changed), options, base)
    written = tuple(f for p in commit.partitions for f in p.added)
    return Staged(commit, rows, sum(len(p.files) for p in parts), 0, written)


def _cdc_columns(meta: TableMeta, stmt: Statement) -> list[str] | None:
    """What the merge read must load: a DELETE needs where a key lives, its sequence value and
    the predicate columns; an UPDATE writes complete rows, so everything."""
    if stmt.kind is StatementKind.UPDATE:
        return None
    wanted = {*key_and_partition_columns(meta), *(p.column for p in stmt.where)}
    if meta.sequence_column is not None:
        wanted.add(meta.sequence_column)
    return [n for n in meta.schema.names if n in wanted]


def _cdc_changes(
    meta: TableMeta, stmt: Statement, parts: Sequence[PartitionScan]
) -> Iterator[tuple[int, pa.Table]]:
    """Per bucket: how many keys match, and their changes (row kind set)."""
    runs = pa.schema(
        [f if f.name in meta.primary_key else f.with_nullable(True) for f in meta.schema]
    )
    key_predicates = [p for p in stmt.where if p.column in meta.primary_key]
    buckets = read_merged_buckets(
        meta.files,
        [p.files for p in parts],
        runs,
        meta.primary_key,
        sequence_column=meta.sequence_column,
        columns=_cdc_columns(meta, stmt),
        row_filter=key_predicates or None,  # safe before the merge: all versions of a key alike
        include_row_kind=True,
    )
    for batches in buckets:
        if not batches:
            continue
        merged = pa.Table.from_batches(batches)
        live = merged.filter(pc.equal(merged.column(ROW_KIND_COLUMN), ROW_KIND_UPSERT))
        hits = live.filter(pa.array(matching(live, stmt.where, runs)))
        if hits.num_rows:
            yield hits.num_rows, _bucket_changes(meta, stmt, hits)


def _bucket_changes(meta: TableMeta, stmt: Statement, hits: pa.Table) -> pa.Table:
    if stmt.kind is StatementKind.DELETE:
        return _deletes_of(meta, hits)
    updated = assign(hits, np.ones(hits.num_rows, dtype=np.bool_), stmt.assignments)
    if UNSET_COLUMN in updated.column_names:
        updated = _drop_assigned_from_unset(updated, stmt.assignments.keys())
    moved = _moved(meta, hits, updated)
    return pa.concat_tables([_deletes_of(meta, moved), updated], promote_options="default")


def _deletes_of(meta: TableMeta, rows: pa.Table) -> pa.Table:
    """Delete changes of ``rows``' keys where they live now, at their sequence values."""
    keep = key_and_partition_columns(meta)
    if meta.sequence_column is not None and meta.sequence_column not in keep:
        keep.append(meta.sequence_column)
    kinds = pa.array(np.full(rows.num_rows, ROW_KIND_DELETE, dtype=np.int8))
    return rows.select(keep).append_column(pa.field(ROW_KIND_COLUMN, pa.int8()), kinds)


def _moved(meta: TableMeta, before: pa.Table, after: pa.Table) -> pa.Table:
    """The rows (old values) whose partition an assignment changed."""
    moved: np.ndarray = np.zeros(before.num_rows, dtype=np.bool_)
    for column in meta.spec.columns:
        old, new = before.column(column), after.column(column)
        differs = pc.fill_null(pc.not_equal(old, new), pc.xor(pc.is_null(old), pc.is_null(new)))
        moved |= differs.to_numpy(zero_copy_only=False).astype(np.bool_)
    return before.filter(pa.array(moved))


def _drop_assigned_from_unset(rows: pa.Table, assigned: Iterable[str]) -> pa.Table:
    """A partial winner keeps naming the columns it still lacks, less the assigned ones (their
    value is now known); a list left empty becomes null (a complete row)."""
    names = set(assigned)
    index = rows.schema.get_field_index(UNSET_COLUMN)
    lists = rows.column(index).to_pylist()
    cleaned = [
        None
        if unset is None or not [c for c in unset if c not in names]
        else [c for c in unset if c not in names]
        for unset in lists
    ]
    return rows.set_column(
        index, rows.schema.field(index), pa.array(cleaned, rows.schema.field(index).type)
    )


# ----------------------------------------------------------------------------- running

BeforeCommit = Callable[[int], None]


def run_statement(
    table: Table,
    where: WhereSpec,
    assignments: Mapping[str, object] | None,
    *,
    key: IdempotencyKey | None = None,
    options: WriteOptions | None = None,
    retry: RetryPolicy | None = None,
    before_commit: BeforeCommit | None = None,
) -> StatementResult:
    """Evaluate, write and commit one statement; on losing to a concurrent write, delete what
    it wrote and evaluate it again on the new version (bounded by ``retry``).

    ``before_commit(attempt)`` runs after an attempt's files are written and before its commit
    (tests use it to land a concurrent commit exactly there)."""
    started = time.monotonic()
    write_options = options or DEFAULT_WRITE_OPTIONS

    def attempt(number: int) -> StatementResult:
        table.refresh()
        stmt = statement(table.meta, where, assignments)
        base = table.current_version()
        staged = stage(table, stmt, base, write_options)
        if staged.commit is None:
            return _done(table, stmt, staged, (base, number, started), None)
        if before_commit is not None:
            before_commit(number)
        try:
            result = _commit(table, staged.commit, key)
        except CommitConflict as exc:
            _remove_paths(table.meta, staged.paths)  # definitely not landed
            log.info(
                "statement_conflict",
                table=table.name,
                attempt=number,
                base_version=base,
                kind=exc.kind.value,
                winning_op=exc.winning_op,
                actual_version=exc.actual_version,
            )
            raise
        except (CommitRejected, CatalogUnavailableError):
            _remove_paths(table.meta, staged.paths)  # definitely not landed
            raise
        if result.replayed:  # this key landed before: ours are nobody's files
            _remove_paths(table.meta, staged.paths)
        return _done(table, stmt, staged, (base, number, started), result)

    return (retry or STATEMENT_RETRY).run(attempt, retry_if=_evaluate_again)


def _evaluate_again(error: Exception) -> bool:
    """A statement that lost is evaluated again on the new version, whatever won; a table that
    stayed locked (``busy``) is not waited for longer than the committer already did."""
    return isinstance(error, CommitConflict) and error.kind is not ConflictKind.BUSY


def _commit(table: Table, commit: TableCommit, key: IdempotencyKey | None) -> CommitResult:
    request = CommitRequest(tables=(commit,), key=key or IdempotencyKey.anonymous())
    return table.catalog.commit(request, known={table.name: table.meta})


def _done(
    table: Table,
    stmt: Statement,
    staged: Staged,
    run: tuple[int, int, float],
    result: CommitResult | None,
) -> StatementResult:
    """The result, and the statement's one log line."""
    base, attempt, started = run
    outcome = StatementResult(
        table=table.name,
        kind=stmt.kind,
        rows=staged.rows,
        base_version=base,
        version=result.version_of(table.name) if result is not None else None,
        files_read=staged.files_read,
        files_replaced=staged.files_replaced,
        files_written=len(staged.written),
        attempts=attempt,
        commit=result,
        vectors_written=staged.vectors,
        vector_files=len(staged.vector_files),
    )
    log.info(
        "statement",
        table=table.name,
        kind=stmt.kind.value,
        rows=outcome.rows,
        base_version=base,
        version=outcome.version,
        files_read=outcome.files_read,
        files_replaced=outcome.files_replaced,
        files_written=outcome.files_written,
        vectors_written=outcome.vectors_written,
        vector_files=outcome.vector_files,
        attempts=attempt,
        duration_ms=round((time.monotonic() - started) * 1000, 1),
    )
    return outcome


def _remove(meta: TableMeta, files: Sequence[DataFile]) -> None:
    meta.files.discard(file.path for file in files)


def _remove_paths(meta: TableMeta, paths: Sequence[str]) -> None:
    """Delete files by relative path: data files and vector files alike."""
    if paths:
        meta.files.discard(paths)


__all__ = [
    "DELETION_VECTORS_PROPERTY",
    "STATEMENT_RETRY",
    "Statement",
    "StatementError",
    "StatementKind",
    "StatementResult",
    "run_statement",
    "statement",
    "uses_vectors",
]
