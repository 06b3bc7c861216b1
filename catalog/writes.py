"""Writing rows into tables without any engine: append, upsert and delete.

Each operation writes its Parquet files first and returns the :class:`TableCommit` that
publishes them; :class:`catalog.Table` commits it alone, :class:`catalog.Transaction` together
with other tables. Rows are checked against the table schema before anything is written: a
row that does not fit is an error, never a silent cast, and then nothing is committed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc

from catalog.errors import SchemaError
from catalog.files.bucketing import bucket_ids
from catalog.files.evolution import is_widening
from catalog.files.partial import has_partial_rows
from catalog.files.writer import WriteOptions, write_data_files, write_merge_run
from catalog.meta import TableMeta
from catalog.model import (
    ROW_KIND_COLUMN,
    ROW_KIND_DELETE,
    ROW_KIND_UPSERT,
    UNSET_COLUMN,
    UNSET_TYPE,
    CommitOp,
    DataFile,
    FileAction,
    FileOp,
    PartitionCommit,
    TableCommit,
)
from catalog.partitioning import PartitionValue

DEFAULT_WRITE_OPTIONS = WriteOptions()


@dataclass(frozen=True)
class PartitionSlice:
    """The rows of one leaf partition (and bucket, for CDC tables)."""

    desc: str
    values: tuple[tuple[str, PartitionValue], ...]
    bucket: int | None
    rows: pa.Table


def conform(
    meta: TableMeta,
    data: pa.Table | pa.RecordBatch,
    *,
    keys_only: bool = False,
    schema: pa.Schema | None = None,
) -> pa.Table:
    """``data`` as the table schema: same names, exact or widening types, nulls where allowed.

    Missing nullable columns become nulls; unknown columns, incompatible types and nulls in
    required columns are refused naming the column. With ``keys_only``, only the primary-key
    (and given partition) columns are required, for deletes.
    """
    table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
    if not isinstance(table, pa.Table):
        raise SchemaError(
            f"expected a pyarrow Table, got {type(data).__name__}", table=str(meta.name)
        )
    schema = schema or meta.schema
    unknown = [n for n in table.column_names if n not in schema.names and n != ROW_KIND_COLUMN]
    if unknown:
        raise SchemaError(
            f"column {unknown[0]!r} is not in {meta.name}", table=str(meta.name), column=unknown[0]
        )
    wanted = [
        f
        for f in schema
        if not keys_only or f.name in meta.primary_key or f.name in table.column_names
    ]
    columns = [_conform_column(meta, table, field) for field in wanted]
    return pa.Table.from_arrays(columns, schema=pa.schema(wanted))


def _conform_column(meta: TableMeta, table: pa.Table, field: pa.Field) -> pa.ChunkedArray:
    name = str(meta.name)
    if field.name not in table.column_names:
        if not field.nullable:
            raise SchemaError(
                f"required column {field.name!r} is missing", table=name, column=field.name
            )
        return pa.chunked_array([pa.nulls(table.num_rows, field.type)], field.type)
    column = table.column(field.name)
    if not column.type.equals(field.type):
        column = _cast(column, field, name)
    if not field.nullable and column.null_count:
        raise SchemaError(
            f"column {field.name!r} may not hold nulls ({column.null_count} found)",
            table=name,
            column=field.name,
        )
    return column


def _cast(column: pa.ChunkedArray, field: pa.Field, table: str) -> pa.ChunkedArray:
    """Widenings always; integer to integer only when every value fits; nothing else."""
    source = column.type
    both_ints = pa.types.is_integer(source) and pa.types.is_integer(field.type)
    if not (is_widening(source, field.type) or both_ints):
        raise SchemaError(
            f"column {field.name!r} has type {source}, the table has {field.type}",
            table=table,
            column=field.name,
        )
    try:
        return column.cast(field.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(
            f"column {field.name!r}: values do not fit {field.type}: {exc}",
            table=table,
            column=field.name,
        ) from exc


def split_partitions(meta: TableMeta, data: pa.Table) -> Iterator[PartitionSlice]:
    """Rows grouped by leaf partition: range values first, then the key's hash bucket."""
    for values, rows in _by_range(meta, data):
        if not meta.spec.bucketed:
            yield PartitionSlice(meta.spec.desc(dict(values)), values, None, rows)
            continue
        buckets = bucket_ids(rows, meta.primary_key, meta.spec.hash_buckets)
        for bucket in pc.unique(buckets).to_pylist():
            part = rows.filter(pc.equal(buckets, bucket))
            yield PartitionSlice(meta.spec.desc(dict(values), bucket), values, bucket, part)


def _by_range(
    meta: TableMeta, data: pa.Table
) -> Iterator[tuple[tuple[tuple[str, PartitionValue], ...], pa.Table]]:
    columns = list(meta.spec.columns)
    if not columns:
        yield (), data
        return
    combos = data.select(columns).group_by(columns).aggregate([]).to_pylist()
    for combo in combos:
        mask = None
        for column in columns:
            value = combo[column]
            test = (
                pc.is_null(data.column(column))
                if value is None
                else pc.equal(data.column(column), pa.scalar(value, data.schema.field(column).type))
            )
            mask = test if mask is None else pc.and_(mask, test)
        yield tuple((c, cast(PartitionValue, combo[c])) for c in columns), data.filter(mask)


def stage_append(
    meta: TableMeta,
    data: pa.Table,
    options: WriteOptions = DEFAULT_WRITE_OPTIONS,
    base_version: int | None = None,
) -> TableCommit:
    """Write ``data`` as files of an append commit (one or more files per partition)."""
    if meta.is_cdc:
        raise SchemaError(
            f"{meta.name} has a primary key: use upsert() and delete()", table=str(meta.name)
        )
    rows = conform(meta, data)
    parts = []
    for part in split_partitions(meta, rows):
        files = write_data_files(
            part.rows,
            meta.files,
            partition=part.values,
            schema_id=meta.current_schema_id,
            field_ids=meta.field_ids,
            options=options,
        )
        parts.append(_adds(part.desc, files))
    return TableCommit(
        table=str(meta.name), op=CommitOp.APPEND, partitions=tuple(parts), base_version=base_version
    )


def stage_changes(
    meta: TableMeta,
    changes: pa.Table,
    options: WriteOptions = DEFAULT_WRITE_OPTIONS,
    base_version: int | None = None,
) -> TableCommit:
    """Write changes (rows with ``_ls_kind``) as one merge-run file per touched bucket."""
    if not meta.is_cdc:
        raise SchemaError(f"{meta.name} has no primary key: use append()", table=str(meta.name))
    parts = []
    for part in split_partitions(meta, changes):
        file = write_merge_run(
            part.rows,
            meta.files,
            meta.primary_key,
            bucket=part.bucket if part.bucket is not None else 0,
            partition=part.values,
            sequence_column=meta.sequence_column,
            schema_id=meta.current_schema_id,
            field_ids=meta.field_ids,
            options=options,
        )
        parts.append(_adds(part.desc, [file]))
    return TableCommit(
        table=str(meta.name), op=CommitOp.MERGE, partitions=tuple(parts), base_version=base_version
    )


def key_and_partition_columns(meta: TableMeta) -> list[str]:
    """The columns that say where a row lives, each once (a key column may also partition)."""
    return list(dict.fromkeys([*meta.primary_key, *meta.spec.columns]))


def delete_columns(meta: TableMeta) -> list[str]:
    """The columns a delete change carries: where the row lives and, on a sequence-ordered
    table, the sequence value the delete is ordered at."""
    columns = key_and_partition_columns(meta)
    if meta.sequence_column is not None and meta.sequence_column not in columns:
        columns.append(meta.sequence_column)
    return columns


def run_schema(meta: TableMeta) -> pa.Schema:
    """The schema of merge-run files: key columns required, every other column nullable
    (delete rows carry only their key), plus the row-kind column."""
    fields = [f if f.name in meta.primary_key else f.with_nullable(True) for f in meta.schema]
    return pa.schema([*fields, pa.field(ROW_KIND_COLUMN, pa.int8(), nullable=False)])


def changes(meta: TableMeta, rows: pa.Table) -> pa.Table:
    """Rows that already carry their row kind (e.g. decoded CDC events), as a merge run's
    content: data columns conformed to the run schema, then the row-kind column, then the
    unset-columns list if any row is a partial change."""
    if ROW_KIND_COLUMN not in rows.column_names:
        raise SchemaError(f"changes need the {ROW_KIND_COLUMN!r} column", table=str(meta.name))
    schema = run_schema(meta)
    columns = [c for c in rows.column_names if c != UNSET_COLUMN]
    data = conform(meta, rows.select(columns), schema=pa.schema(list(schema)[:-1]))
    kinds = rows.column(ROW_KIND_COLUMN).cast(pa.int8())
    table = pa.Table.from_arrays([*data.columns, kinds], schema=schema)
    if has_partial_rows(rows):  # changes that left columns out: see catalog.files.partial
        unset = rows.column(UNSET_COLUMN).cast(UNSET_TYPE)
        table = table.append_column(pa.field(UNSET_COLUMN, UNSET_TYPE), unset)
    return table


def upserts(meta: TableMeta, data: pa.Table) -> pa.Table:
    rows = conform(meta, data)
    kinds = pa.chunked_array([pa.array([ROW_KIND_UPSERT] * rows.num_rows, pa.int8())])
    return pa.Table.from_arrays([*rows.columns, kinds], schema=run_schema(meta))


def deletes(meta: TableMeta, keys: pa.Table) -> pa.Table:
    """Delete rows: the key (and partition) columns set, every other column null; on a
    sequence-ordered table the sequence value too, since the merge orders a key's changes by
    it and a delete without one could not say whether it comes before or after the key's row."""
    located = delete_columns(meta)
    missing = [c for c in located if c not in keys.column_names]
    if missing:
        why = " (the table's sequence column)" if missing[0] == meta.sequence_column else ""
        raise SchemaError(
            f"deletes need column {missing[0]!r}{why}", table=str(meta.name), column=missing[0]
        )
    rows = conform(meta, keys.select(located), keys_only=True)
    schema = run_schema(meta)
    columns = [
        rows.column(f.name)
        if f.name in rows.column_names
        else pa.chunked_array([pa.nulls(rows.num_rows, f.type)], f.type)
        for f in schema
        if f.name != ROW_KIND_COLUMN
    ]
    kinds = pa.chunked_array([pa.array([ROW_KIND_DELETE] * rows.num_rows, pa.int8())])
    return pa.Table.from_arrays([*columns, kinds], schema=schema)


def _adds(desc: str, files: Sequence[DataFile]) -> PartitionCommit:
    return PartitionCommit(
        partition_desc=desc, ops=tuple(FileOp(action=FileAction.ADD, file=f) for f in files)
    )
