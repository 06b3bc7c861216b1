"""Writing data files: Parquet + zstd under the table location, described as :class:`DataFile`.

Files are written through the storage seam (:mod:`catalog.files.storage`), which says why: on a
local disk under a temporary name, fsync'ed, then renamed (a crash leaves at most a dot-named
``.tmp`` leftover); on an object store in one upload under the final unique name, which appears
whole or not at all. Either way no commit names a file before it is complete.

:func:`prepare_merge_run` turns one batch of changes of a CDC bucket into the content of its
merge-run file (one row per key, latest change, sorted by key, with the row-kind column).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from catalog.errors import SchemaError
from catalog.field_ids import with_field_ids
from catalog.files.layout import PartitionValues, new_data_file_path
from catalog.files.merge import last_change_per_key
from catalog.files.partial import take_filled
from catalog.files.stats import column_stats
from catalog.files.storage import Location, Storage, storage_for
from catalog.model import (
    ROW_KIND_COLUMN,
    ROW_KIND_DELETE,
    ROW_KIND_UPSERT,
    UNAWARE_BUCKET,
    DataFile,
)

#: Key of the Parquet footer metadata entry holding the table schema id of the file.
SCHEMA_ID_KEY = b"lakestream.schema_id"
MiB = 1 << 20


@dataclass(frozen=True)
class WriteOptions:
    """How files are written.

    A row group holds at most ``row_group_rows`` rows and about ``row_group_bytes`` of decoded
    (in-memory Arrow) data: large enough for good compression and few footer entries, small
    enough that a reader decoding one row group at a time stays within bounded memory.
    """

    compression: str = "zstd"
    compression_level: int | None = None
    #: Codec of merge runs, the short-lived level-0 files a compaction rewrites (with
    #: ``compression``): every merge-on-read decodes all of them, so they favour decode speed
    #: over size, as LSM engines do (RocksDB's per-level compression, Paimon's
    #: ``file.compression.per.level``). None: the same as ``compression``.
    run_compression: str | None = "lz4"
    row_group_rows: int = 128 * 1024
    row_group_bytes: int = 64 * MiB
    #: Size on disk the splitter aims at; a file ends at the first row group past it.
    target_file_bytes: int = 128 * MiB
    #: Local disks: fsync each file before the rename, so a power loss cannot leave an empty
    #: renamed file. (Object stores acknowledge an upload once it is durable.)
    fsync: bool = True


DEFAULT_OPTIONS = WriteOptions()


def _rows_per_group(data: pa.Table, options: WriteOptions) -> int:
    if data.num_rows == 0:
        return options.row_group_rows
    row_bytes = max(1, int(data.nbytes) // int(data.num_rows))
    return max(1, min(options.row_group_rows, options.row_group_bytes // row_bytes))


def _is_bytes(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_string_view(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_dictionary(t)
    )


def _byte_leaves(name: str, t: pa.DataType) -> Iterator[str]:
    """Parquet paths of the string/binary leaves of one field (pyarrow's compliant nesting)."""
    if _is_bytes(t):
        yield name
    elif pa.types.is_struct(t):
        for i in range(t.num_fields):
            yield from _byte_leaves(f"{name}.{t.field(i).name}", t.field(i).type)
    elif pa.types.is_map(t):
        yield from _byte_leaves(f"{name}.key_value.key", t.key_type)
        yield from _byte_leaves(f"{name}.key_value.value", t.item_type)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _byte_leaves(f"{name}.list.element", t.value_type)


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The Parquet columns written with dictionary encoding: strings and binaries only.

    A dictionary pays off where values repeat and are wide (a status, a country, a name). For
    numbers and timestamps it saves little (zstd compresses their repeats anyway), costs a hash
    per value to write and a gather per value to read, and a small file (a merge run) keeps
    even unique values under the dictionary size limit, so every column was stored as a
    dictionary plus indices. Strings keep it: low-cardinality ones are then read as dictionaries
    by merge-on-read (:func:`catalog.files.reader.small_dictionary`).
    """
    return [leaf for field in schema for leaf in _byte_leaves(field.name, field.type)]


def _open_writer(
    sink: object,
    schema: pa.Schema,
    options: WriteOptions,
    *,
    sorted_by: Sequence[str],
    schema_id: int,
    field_ids: Mapping[str, int] | None,
) -> pq.ParquetWriter:
    """``field_ids`` (the table's: :func:`catalog.field_ids.field_ids`) go into the Parquet
    schema, so that Iceberg readers resolve the columns by id (issue 51)."""
    metadata = dict(schema.metadata or {})
    metadata[SCHEMA_ID_KEY] = str(schema_id).encode()
    if field_ids is not None:
        schema = with_field_ids(schema, field_ids)
    sorting = (
        list(pq.SortingColumn.from_ordering(schema, [(c, "ascending") for c in sorted_by]))
        if sorted_by
        else None
    )
    return pq.ParquetWriter(
        sink,
        schema.with_metadata(metadata),
        compression=options.compression,
        compression_level=options.compression_level,
        use_dictionary=dictionary_columns(schema),
        sorting_columns=sorting,
    )


class _FileSink:
    """A Parquet file written through the storage seam, visible under its name on commit."""

    def __init__(
        self,
        storage: Storage,
        relative: str,
        schema: pa.Schema,
        options: WriteOptions,
        *,
        sorted_by: Sequence[str],
        schema_id: int,
        field_ids: Mapping[str, int] | None = None,
    ) -> None:
        self.relative = relative
        self.output = storage.open_output(relative, fsync=options.fsync)
        try:
            self.writer = _open_writer(
                self.output.sink,
                schema,
                options,
                sorted_by=sorted_by,
                schema_id=schema_id,
                field_ids=field_ids,
            )
        except BaseException:
            self.output.abort()
            raise

    def write(self, data: pa.Table, rows_per_group: int) -> None:
        self.writer.write_table(data, row_group_size=rows_per_group)

    def tell(self) -> int:
        return self.output.tell()

    def commit(self) -> int:
        self.writer.close()
        return self.output.commit()

    def abort(self) -> None:
        """Called while another error propagates: a store that is down fails the close too,
        and that second error must not hide the first."""
        try:
            with contextlib.suppress(OSError):
                self.writer.close()
        finally:
            self.output.abort()


def _describe(relative: str, size: int, data: pa.Table, schema_id: int) -> DataFile:
    return DataFile(
        path=relative,
        size_bytes=size,
        row_count=data.num_rows,
        schema_id=schema_id,
        stats=column_stats(data),
    )


def write_data_file(
    data: pa.Table,
    location: Location,
    *,
    partition: PartitionValues = (),
    bucket: int = UNAWARE_BUCKET,
    schema_id: int = 0,
    sorted_by: Sequence[str] = (),
    options: WriteOptions = DEFAULT_OPTIONS,
    field_ids: Mapping[str, int] | None = None,
) -> DataFile:
    """Write ``data`` as ONE Parquet file (e.g. a CDC bucket's merge run) and describe it.

    ``sorted_by`` records, in the footer, that the rows are sorted by these columns (it does not
    sort them). The returned path is relative to ``location`` (see :mod:`catalog.files.layout`).
    ``field_ids`` (the table's :attr:`~catalog.meta.TableMeta.field_ids`) are written as the
    columns' Parquet field ids.
    """
    relative = new_data_file_path(partition, bucket)
    sink = _FileSink(
        storage_for(location),
        relative,
        data.schema,
        options,
        sorted_by=sorted_by,
        schema_id=schema_id,
        field_ids=field_ids,
    )
    try:
        sink.write(data, _rows_per_group(data, options))
        size = sink.commit()
    except BaseException:
        sink.abort()
        raise
    return _describe(relative, size, data, schema_id)


def _row_group_slices(data: pa.Table, rows: int) -> Iterator[pa.Table]:
    for start in range(0, data.num_rows, rows):
        yield data.slice(start, rows)


def write_data_files(
    data: pa.Table,
    location: Location,
    *,
    partition: PartitionValues = (),
    bucket: int = UNAWARE_BUCKET,
    schema_id: int = 0,
    sorted_by: Sequence[str] = (),
    options: WriteOptions = DEFAULT_OPTIONS,
    field_ids: Mapping[str, int] | None = None,
) -> list[DataFile]:
    """Write ``data`` as files of about ``options.target_file_bytes`` each (append, compaction).

    Row groups are written one at a time; a file is closed at the first row group that brings it
    past the target, so files overshoot by at most one row group. Row order is kept (each file
    holds a contiguous slice), so sorted input gives sorted files. Empty input writes no file.
    If writing fails, the files already finished are removed too: the caller never learnt them.
    """
    rows = _rows_per_group(data, options)
    storage = storage_for(location)
    files: list[DataFile] = []
    sink: _FileSink | None = None
    start = 0
    try:
        for offset, piece in enumerate(_row_group_slices(data, rows)):
            if sink is None:
                relative = new_data_file_path(partition, bucket)
                sink = _FileSink(
                    storage,
                    relative,
                    data.schema,
                    options,
                    sorted_by=sorted_by,
                    schema_id=schema_id,
                    field_ids=field_ids,
                )
                start = offset * rows
            sink.write(piece, rows)
            if sink.tell() >= options.target_file_bytes:
                end = offset * rows + piece.num_rows
                files.append(_finish(sink, data.slice(start, end - start), schema_id))
                sink = None
        if sink is not None:
            files.append(_finish(sink, data.slice(start), schema_id))
            sink = None
    except BaseException:
        # nobody got their descriptions: nothing may stay behind unnamed
        storage.discard(done.path for done in files)
        raise
    finally:
        if sink is not None:
            sink.abort()
    return files


def _finish(sink: _FileSink, content: pa.Table, schema_id: int) -> DataFile:
    size = sink.commit()
    return _describe(sink.relative, size, content, schema_id)


# ------------------------------------------------------------------------------ merge runs


def _row_kinds(data: pa.Table) -> pa.Table:
    """``data`` with a valid int8 row-kind column (all upserts when the column is absent)."""
    if ROW_KIND_COLUMN not in data.schema.names:
        kinds = pa.array(np.full(data.num_rows, ROW_KIND_UPSERT, dtype=np.int8))
        return data.append_column(pa.field(ROW_KIND_COLUMN, pa.int8(), nullable=False), kinds)
    index = data.schema.get_field_index(ROW_KIND_COLUMN)
    kinds = pc.cast(data.column(index), pa.int8())
    valid = pc.is_in(kinds, pa.array([ROW_KIND_UPSERT, ROW_KIND_DELETE], pa.int8()))
    if kinds.null_count or not pc.all(valid, min_count=0).as_py():
        raise SchemaError(
            f"{ROW_KIND_COLUMN} must hold only 0 (upsert) or 1 (delete)", column=ROW_KIND_COLUMN
        )
    field = pa.field(ROW_KIND_COLUMN, pa.int8(), nullable=False)
    return data.set_column(index, field, kinds)


def _check_not_null(data: pa.Table, columns: Sequence[str], role: str) -> None:
    for column in columns:
        if column not in data.schema.names:
            raise SchemaError(f"{role} column {column!r} is missing", column=column)
        if data.column(column).null_count:
            raise SchemaError(f"{role} column {column!r} holds nulls", column=column)


def prepare_merge_run(
    data: pa.Table, primary_key: Sequence[str], sequence_column: str | None = None
) -> pa.Table:
    """The content of one CDC merge-run file: latest change per key, sorted by key.

    Within ``data``, the change with the highest ``sequence_column`` value wins when one is
    given (ties: the later row), otherwise the last occurrence of the key. The row-kind column
    is added as all upserts when absent, and validated (int8, 0 or 1) when present. Key and
    sequence values must not be null.
    """
    _check_not_null(data, primary_key, "primary key")
    if sequence_column is not None:
        _check_not_null(data, [sequence_column], "sequence")
    data = _row_kinds(data)
    winners = last_change_per_key(data, primary_key, sequence_column)
    return take_filled(data, winners, primary_key, sequence_column)


def write_merge_run(
    changes: pa.Table,
    location: Location,
    primary_key: Sequence[str],
    *,
    bucket: int,
    partition: PartitionValues = (),
    sequence_column: str | None = None,
    schema_id: int = 0,
    options: WriteOptions = DEFAULT_OPTIONS,
    field_ids: Mapping[str, int] | None = None,
) -> DataFile:
    """Write one CDC bucket's changes of one batch as its merge-run file (prepared, key-sorted).

    ``changes`` must hold rows of ONE bucket (see :func:`catalog.files.bucketing.split_by_bucket`).
    """
    run = prepare_merge_run(changes, primary_key, sequence_column)
    return write_data_file(
        run,
        location,
        partition=partition,
        bucket=bucket,
        schema_id=schema_id,
        sorted_by=primary_key,
        options=_for_runs(options),
        field_ids=field_ids,
    )


def _for_runs(options: WriteOptions) -> WriteOptions:
    if options.run_compression is None or options.run_compression == options.compression:
        return options
    return replace(options, compression=options.run_compression, compression_level=None)
