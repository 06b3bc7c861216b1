"""Reading data files as Arrow: plain scans and merge-on-read of CDC buckets.

Both readers take the *current* table schema and read every file under it
(:func:`catalog.files.evolution.align_to_schema`), so files written under older schemas read
with added columns as nulls and widened types cast.

Plain scan (:func:`read_files`): batches of at most ``batch_size`` rows, in file order. Given
the id of the schema it reads under, consecutive files written under that schema go to
``pyarrow.dataset`` as one file list with that schema: Arrow opens, decodes and filters several
files at once on its own thread pool and skips per-file discovery, which is what a table of many
small files (a never-compacted stream of appends) pays for most - a dataset and scanner per file
cost more than its rows. Files of older schemas (and bare paths, whose schema is unknown) are
read one by one and aligned. Memory is bounded by the scanner's read-ahead (a few files, each
up to 16 batches in flight), not by the file list. With :class:`Predicate` filters, files whose
statistics exclude a match are skipped before they are opened, and the filter is pushed into
the Parquet scan (row-group statistics).

Deletion vectors: a file whose entry has one reads as its rows minus the positions it marks
(0-based, counting the file's rows as written). Such a file leaves the dataset fast path: it is
read row group by row group (a dataset scan carries no row index), each batch masked before
the filter, row groups pruned by the filter's statistics. A whole-file read (a compaction bin)
drops the marked rows; a merge run is masked before the merge, so a marked row never competes
for its key.

Merge-on-read (:func:`read_merged`): the runs of ONE bucket are read whole (projected columns
only), merged with the vectorised kernel of :mod:`catalog.files.merge` and yielded in batches.
A bucket is the unit of parallelism and of memory: peak memory is about twice the decoded size of
the bucket's runs restricted to the columns read (runs + the merged result), plus ~24 bytes per
row for the sort. Size buckets accordingly (the bucket count of a table bounds it); a streaming
k-way merge over row groups would lower that bound but is not needed at the sizes buckets have.
:func:`read_merged_buckets` reads the buckets of a scan ahead on a thread pool, one bucket per
worker (memory: workers + 1 buckets).

Late strings: a run holds every version of a key, and the losing ones are decoded only to be
dropped. String columns stored with a small dictionary (a status, a country; judged from the
footers, :func:`small_dictionary`) are read as dictionary arrays - indices only - and turned into
strings after the merge, for the winning rows alone (never key or sequence columns; not in
reads with a key filter or of runs that need schema alignment).

Filters in a merge read: predicates on primary-key columns only may be applied before the merge
(they keep or drop every version of a key alike), and also prune whole runs by statistics. Every
other filter runs after the merge, so it can never resurrect an older version of a key whose
newest version does not match.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Collection, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, NamedTuple, TypeAlias, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from catalog.errors import SchemaError
from catalog.files.evolution import align_to_schema
from catalog.files.merge import merge_runs
from catalog.files.pruning import Predicate, may_contain, to_expression
from catalog.files.storage import Location, Storage, storage_for
from catalog.files.tail import beating, key_mask, split_partial
from catalog.files.vectors import keep_mask, load_vector, vector_positions
from catalog.manifest import FileManifest
from catalog.model import (
    ROW_KIND_COLUMN,
    ROW_KIND_UPSERT,
    UNSET_COLUMN,
    UNSET_TYPE,
    DataFile,
    VectorRef,
)

if TYPE_CHECKING:
    import pyarrow.dataset as ds

#: Rows per yielded batch unless told otherwise.
DEFAULT_BATCH_ROWS = 128 * 1024
#: Most buckets :func:`read_merged_buckets` reads at once, whatever the core count (memory).
MAX_BUCKETS_AHEAD = 8

#: A row filter: our predicates (prune files, push key filters) or any Arrow expression.
RowFilter: TypeAlias = "pc.Expression | Sequence[Predicate] | None"

_Rows = TypeVar("_Rows", pa.RecordBatch, pa.Table)

_ROW_KIND_FIELD = pa.field(ROW_KIND_COLUMN, pa.int8(), nullable=False)
_UNSET_FIELD = pa.field(UNSET_COLUMN, UNSET_TYPE)


def _split_filter(
    row_filter: RowFilter, schema: pa.Schema
) -> tuple[list[Predicate], pc.Expression | None]:
    if row_filter is None:
        return [], None
    if isinstance(row_filter, pc.Expression):
        return [], row_filter
    predicates = list(row_filter)
    return predicates, to_expression(predicates, schema)


def _path(storage: Storage, file: DataFile | str) -> str:
    relative = file.path if isinstance(file, DataFile) else file
    return storage.path(relative)


def _skip(file: DataFile | str, predicates: Sequence[Predicate], schema: pa.Schema) -> bool:
    return isinstance(file, DataFile) and not may_contain(file, predicates, schema)


def _same_columns(physical: pa.Schema, wanted: pa.Schema) -> bool:
    """Whether the file holds every wanted column with the wanted type (no alignment needed)."""
    names = set(physical.names)
    return all(f.name in names and physical.field(f.name).type.equals(f.type) for f in wanted)


def _dataset(
    source: str | list[str], fs: pafs.FileSystem, schema: pa.Schema | None = None
) -> ds.Dataset:
    """Imports ``pyarrow.dataset`` on first use: it pulls in pandas (~0.25 s), which every
    process importing the catalog would pay - each ``lakestream`` command, each Python worker -
    while only filtered scans and whole-file rewrites need it."""
    import pyarrow.dataset as ds

    return ds.dataset(source, format="parquet", schema=schema, filesystem=fs)


def _subschema(schema: pa.Schema, columns: Sequence[str]) -> pa.Schema:
    unknown = [c for c in columns if schema.get_field_index(c) < 0]
    if unknown:
        raise SchemaError(f"unknown column {unknown[0]!r}", column=unknown[0])
    return pa.schema([schema.field(c) for c in columns])


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(batch.columns, schema=schema)


def _scan_file(
    fs: pafs.FileSystem,
    path: str,
    schema: pa.Schema,
    columns: Sequence[str],
    expression: pc.Expression | None,
    *,
    batch_size: int,
) -> Iterator[pa.RecordBatch]:
    dataset = _dataset(path, fs)
    out = _subschema(schema, columns)
    if _same_columns(dataset.schema, schema):
        scanner = dataset.scanner(columns=list(columns), filter=expression, batch_size=batch_size)
        batches = (_conform(b, out) for b in scanner.to_batches())
    else:
        present = [n for n in schema.names if n in dataset.schema.names]
        scanner = dataset.scanner(columns=present, batch_size=batch_size)
        batches = (
            _filter_project(align_to_schema(b, schema), expression, columns)
            for b in scanner.to_batches()
        )
    yield from (b for b in batches if b.num_rows)


def _filter_project(
    batch: _Rows, expression: pc.Expression | None, columns: Sequence[str]
) -> _Rows:
    if expression is not None:
        batch = batch.filter(expression)
    return batch.select(list(columns))


def read_whole_files(
    location: Location,
    files: Sequence[DataFile],
    schema: pa.Schema,
    schema_id: int,
) -> pa.Table:
    """Every row of some plain data files, in file order, as one table under ``schema``.

    For rewriting files (compaction bins), where each file is read whole. Consecutive files
    written under ``schema_id`` (the table's current schema) are read as ONE dataset with the
    schema given, which decodes them in parallel and skips per-file discovery (a dataset per small
    file costs more than its rows); files of older schemas are read one by one and aligned to
    ``schema`` by the evolution rules.
    """
    storage = storage_for(location)
    fs = storage.filesystem
    tables: list[pa.Table] = []

    def together(file: DataFile) -> bool:
        return file.schema_id == schema_id and file.vector is None

    for current, group in itertools.groupby(files, key=together):
        if current:
            dataset = _dataset([_path(storage, file) for file in group], fs, schema)
            tables.append(dataset.to_table())
            continue
        for file in group:
            table = _read_aligned(fs, _path(storage, file), schema)
            if file.vector is not None:  # a rewrite drops the rows its vector marks
                positions = _positions(storage, file.vector)
                table = table.filter(pa.array(keep_mask(positions, 0, table.num_rows)))
            tables.append(table)
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _positions(storage: Storage, ref: VectorRef) -> npt.NDArray[np.uint64]:
    return vector_positions(load_vector(storage, ref))


def _read_aligned(fs: pafs.FileSystem, path: str, schema: pa.Schema) -> pa.Table:
    file = pq.ParquetFile(path, filesystem=fs)
    present = [n for n in schema.names if n in file.schema_arrow.names]
    present = present or file.schema_arrow.names[:1]  # none written yet: the rows still count
    aligned = align_to_schema(file.read(columns=present), schema)
    assert isinstance(aligned, pa.Table)
    return aligned


def read_file_as_written(
    location: Location,
    file: DataFile,
    schema: pa.Schema,
    *,
    columns: Sequence[str] | None = None,
) -> tuple[pa.Table, npt.NDArray[np.bool_]]:
    """Every row of one plain data file as written - its vector NOT applied - under ``schema``
    restricted to ``columns``, and which rows its vector leaves alive (all: no vector).

    For writers of vectors (append-table DML): a new mark is a position in the file as written,
    so the rows must be read in file coordinates, and a row its vector already marks must never
    match again (``keep`` tells them apart).
    """
    storage = storage_for(location)
    wanted = _subschema(schema, list(columns) if columns is not None else schema.names)
    rows = _read_aligned(storage.filesystem, _path(storage, file), wanted)
    if file.vector is None:
        return rows, np.ones(rows.num_rows, dtype=np.bool_)
    return rows, keep_mask(_positions(storage, file.vector), 0, rows.num_rows)


def read_files(
    location: Location,
    files: Sequence[DataFile | str] | FileManifest,
    schema: pa.Schema,
    *,
    columns: Sequence[str] | None = None,
    row_filter: RowFilter = None,
    batch_size: int = DEFAULT_BATCH_ROWS,
    schema_id: int | None = None,
    also: pc.Expression | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream the rows of plain data files (append, compaction or update history) in order.

    ``files`` are DataFiles or a plan's :class:`~catalog.manifest.FileManifest` (their
    statistics prune), or paths relative to ``location``. Batches follow ``schema`` restricted
    to ``columns`` (all columns by default). ``schema_id`` is ``schema``'s id in the table: files
    written under it are read together, concurrently (see the module doc); without it every file
    is read alone, as one of unknown schema. ``also`` is one more row filter, applied with
    ``row_filter`` inside the scan but never used to prune (the keys a CDC tail decided).
    """
    predicates, expression = _split_filter(row_filter, schema)
    if also is not None:
        expression = also if expression is None else expression & also
    wanted = list(columns) if columns is not None else schema.names
    _subschema(schema, [*wanted, *(p.column for p in predicates)])  # unknown columns fail early
    storage = storage_for(location)
    fs = storage.filesystem
    kept = _kept(files, predicates, schema)

    def together(file: _Kept) -> bool:
        return schema_id is not None and file.schema_id == schema_id and file.vector is None

    for fast, group in itertools.groupby(kept, key=together):
        if fast:
            paths = [storage.path(file.path) for file in group]
            yield from _scan_files(fs, paths, schema, wanted, expression, batch_size=batch_size)
            continue
        for file in group:
            path = storage.path(file.path)
            if file.vector is None:
                yield from _scan_file(fs, path, schema, wanted, expression, batch_size=batch_size)
                continue
            positions = _positions(storage, file.vector)
            yield from _scan_vectored(
                fs, path, schema, wanted, expression, positions=positions, batch_size=batch_size
            )


class _Kept(NamedTuple):
    """A file a read keeps: relative path, schema id (None: unknown), deletion vector. A tuple:
    a plan of many small files builds one per file."""

    path: str
    schema_id: int | None = None
    vector: VectorRef | None = None


def _kept(
    files: Sequence[DataFile | str] | FileManifest,
    predicates: Sequence[Predicate],
    schema: pa.Schema,
) -> Iterator[_Kept]:
    """Each file a match may be in. A manifest is only turned into DataFile objects when
    predicates need their statistics: a few microseconds a file, which a scan of many small
    files would pay for nothing (a vector is parsed only for the files that have one)."""
    if isinstance(files, FileManifest):
        if not predicates:
            ids: list[int] = files.table.column("schema_id").to_pylist()
            vectors: list[str] = files.table.column("vector").to_pylist()
            for path, schema_id, vector in zip(files.paths, ids, vectors, strict=True):
                ref = VectorRef.model_validate_json(vector) if vector else None
                yield _Kept(path, schema_id, ref)
            return
        files = files.data_files()
    for file in files:
        if isinstance(file, str):
            yield _Kept(file)
        elif not _skip(file, predicates, schema):
            yield _Kept(file.path, file.schema_id, file.vector)


def _scan_vectored(
    fs: pafs.FileSystem,
    path: str,
    schema: pa.Schema,
    columns: Sequence[str],
    expression: pc.Expression | None,
    *,
    positions: npt.NDArray[np.uint64],
    batch_size: int,
) -> Iterator[pa.RecordBatch]:
    """A file read minus the rows its vector marks. Positions count the file's rows as written,
    so the mask must come before the filter: the file is read row group by row group (each
    group's first position is the sum of the rows before it) and every group is masked, then
    filtered. Row groups whose statistics exclude the filter are skipped, as a dataset scan
    would skip them; pyarrow's dataset scans carry no row index, so they cannot be used here."""
    file = pq.ParquetFile(path, filesystem=fs)
    physical = file.schema_arrow
    same = _same_columns(physical, schema)
    needed = list(columns) if same and expression is None else list(schema.names)
    present = [n for n in needed if n in physical.names] or physical.names[:1]  # rows to count
    sizes = [file.metadata.row_group(i).num_rows for i in range(file.num_row_groups)]
    starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    groups: Sequence[int] = range(file.num_row_groups)
    if expression is not None and same:
        fragment = next(iter(_dataset(path, fs).get_fragments()))
        groups = [g.id for g in fragment.subset(filter=expression).row_groups]
    out = _subschema(schema, columns)
    for group in groups:
        # a whole row group (at most the writer's row_group_rows) decoded column-parallel:
        # ~20% faster than a single-threaded batch iterator on 2 cores (bench/read/resolved.py)
        table = file.read_row_group(group, columns=present, use_threads=True)
        kept = table.filter(pa.array(keep_mask(positions, int(starts[group]), table.num_rows)))
        if not same:
            kept = align_to_schema(kept, schema)
        result = _filter_project(kept, expression, columns)
        for batch in result.to_batches(max_chunksize=batch_size):
            if batch.num_rows:
                yield batch if batch.schema.equals(out) else _conform(batch, out)


def _scan_files(
    fs: pafs.FileSystem,
    paths: list[str],
    schema: pa.Schema,
    columns: Sequence[str],
    expression: pc.Expression | None,
    *,
    batch_size: int,
) -> Iterator[pa.RecordBatch]:
    """Files that all hold ``schema``'s columns as they are, as ONE dataset: Arrow reads ahead
    over the list on its thread pool and yields batches in file order."""
    out = _subschema(schema, columns)
    scanner = _dataset(paths, fs, schema).scanner(
        columns=list(columns), filter=expression, batch_size=batch_size
    )
    for batch in scanner.to_batches():
        if batch.num_rows:  # the dataset's own fields: at most its metadata differs
            yield batch if batch.schema.equals(out) else _conform(batch, out)


# ------------------------------------------------------------------------ merge-on-read


def _merge_columns(
    schema: pa.Schema,
    columns: Sequence[str] | None,
    primary_key: Sequence[str],
    sequence_column: str | None,
    *,
    predicates: Sequence[Predicate],
    expression_given: bool,
) -> list[str]:
    """The columns a merge read must load: output, keys, sequence, filtered columns."""
    if columns is None or expression_given:  # an Expression's columns are unknown: read all
        return list(schema.names)
    needed = set(columns) | set(primary_key) | {p.column for p in predicates}
    if sequence_column is not None:
        needed.add(sequence_column)
    return [n for n in schema.names if n in needed]


def _with_row_kind(table: pa.Table) -> pa.Table:
    if ROW_KIND_COLUMN in table.schema.names:
        return table
    kinds = pa.array(np.full(table.num_rows, ROW_KIND_UPSERT, dtype=np.int8))
    return table.append_column(_ROW_KIND_FIELD, kinds)


#: A string column chunk averaging at most this many bytes a value, uncompressed, holds a small
#: dictionary: a plain-encoded string costs at least 4 bytes (its length) and a dictionary
#: index up to 4 more, so only dictionary indices of a few bits plus a short dictionary fit.
SMALL_DICTIONARY_BYTES_PER_VALUE = 2.0


def small_dictionary(chunk: pq.ColumnChunkMetaData) -> bool:
    """Whether a column chunk is dictionary-encoded with a dictionary much smaller than its values
    (a status, a country): decoding its indices as a ``DictionaryArray`` is much cheaper than
    copying a string per row."""
    return bool(chunk.has_dictionary_page) and (
        chunk.total_uncompressed_size <= SMALL_DICTIONARY_BYTES_PER_VALUE * chunk.num_values
    )


def _late_strings(
    footers: Sequence[pq.FileMetaData], schema: pa.Schema, compared: Collection[str]
) -> list[str]:
    """Columns of ``schema`` to read as dictionaries and turn into strings after the merge, for
    the winners only: string columns stored with a small dictionary in every row group of every
    run, except the ``compared`` ones (key, sequence: the merge sorts them). Empty unless every
    run holds ``schema``'s columns as they are (no schema evolution)."""
    if not all(_same_columns(footer.schema.to_arrow_schema(), schema) for footer in footers):
        return []
    strings = {f.name for f in schema if pa.types.is_string(f.type) and f.name not in compared}
    for footer in footers:
        for group in range(footer.num_row_groups):
            row_group = footer.row_group(group)
            for leaf in range(row_group.num_columns):
                chunk = row_group.column(leaf)
                if chunk.path_in_schema in strings and not small_dictionary(chunk):
                    strings.discard(chunk.path_in_schema)
    return [name for name in schema.names if name in strings]


def _read_run(
    fs: pafs.FileSystem,
    path: str,
    footer: pq.FileMetaData,
    schema: pa.Schema,
    key_filter: pc.Expression | None,
    *,
    dictionaries: Sequence[str],
    partial: bool = False,
    positions: npt.NDArray[np.uint64] | None = None,
) -> pa.Table:
    """One run, whole, as ``schema`` (+ row kind), rows outside the key filter left out; the
    ``dictionaries`` columns as dictionary arrays (see :func:`_late_strings`). With ``partial``
    (some run of the bucket holds partial changes) the unset-columns list comes last, null for
    runs without it.

    Unfiltered, the file is read directly (a ``pyarrow.dataset`` per run would cost ~0.6 ms of
    discovery and scanner set-up); a key filter goes through a dataset scan, which skips row
    groups by their statistics (a key lookup in a large run). A run with a deletion vector
    (``positions``) is read whole and masked before the key filter, which would shift positions.
    """
    physical = footer.schema.to_arrow_schema()
    present = [n for n in schema.names if n in physical.names]
    system = [c for c in _system_columns(partial) if c in physical.names]
    present += system
    same = _same_columns(physical, schema)
    if same and key_filter is not None and positions is None:
        dataset = _dataset(path, fs)
        table = dataset.to_table(columns=present, filter=key_filter)
    else:
        file = pq.ParquetFile(
            path, metadata=footer, read_dictionary=list(dictionaries) or None, filesystem=fs
        )
        table = file.read(columns=present, use_threads=False)
        if positions is not None:
            table = table.filter(pa.array(keep_mask(positions, 0, table.num_rows)))
            if same and key_filter is not None:
                table = table.filter(key_filter)
    if not same:
        aligned = align_to_schema(table.drop_columns(system), schema)
        for name in system:
            aligned = aligned.append_column(table.schema.field(name), table.column(name))
        table = aligned.filter(key_filter) if key_filter is not None else aligned
    table = _with_row_kind(table)
    if partial and UNSET_COLUMN not in table.column_names:
        table = table.append_column(_UNSET_FIELD, pa.nulls(table.num_rows, UNSET_TYPE))
    target = _run_schema(schema, dictionaries, partial)
    return table if table.schema.equals(target) else table.cast(target)


def _system_columns(partial: bool) -> list[str]:
    return [ROW_KIND_COLUMN, UNSET_COLUMN] if partial else [ROW_KIND_COLUMN]


def _run_schema(schema: pa.Schema, dictionaries: Sequence[str], partial: bool) -> pa.Schema:
    """The schema runs are read as: ``schema``, some strings as dictionaries, + row kind
    (+ the unset-columns list of partial changes). Every column is nullable, whatever the table
    declares: a delete row carries only its key (see ``catalog.writes.run_schema``)."""
    fields = [
        f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in dictionaries else f
        for f in (field.with_nullable(True) for field in schema)
    ]
    return pa.schema([*fields, _ROW_KIND_FIELD, *([_UNSET_FIELD] if partial else [])])


def _decode_dictionaries(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table``'s dictionary columns as the types ``schema`` gives them (plain strings)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type) and field.name in schema.names:
            wanted = schema.field(field.name)
            table = table.set_column(i, wanted, table.column(i).cast(wanted.type))
    return table


def _read_runs(
    fs: pafs.FileSystem,
    paths: Sequence[str],
    schema: pa.Schema,
    key_filter: pc.Expression | None,
    *,
    compared: Collection[str] = (),
    concurrent: bool = True,
    vectors: Sequence[npt.NDArray[np.uint64] | None] = (),
) -> list[pa.Table]:
    """Read the runs, keeping their order: concurrently (Arrow decodes without the GIL) unless
    the caller already reads several buckets at once. With ``compared`` (the columns the merge
    sorts by), low-cardinality string columns not among them come as dictionary arrays
    (:func:`_late_strings`); :func:`_decode_dictionaries` turns them back into strings.
    ``vectors`` gives each run's deletion vector positions (None: none), masked before the
    merge: a marked row never competes for its key."""
    footers = [pq.read_metadata(p, filesystem=fs) for p in paths]
    late = bool(compared) and key_filter is None
    dictionaries = _late_strings(footers, schema, compared) if late else []
    partial = any(UNSET_COLUMN in f.schema.to_arrow_schema().names for f in footers)

    def read(i: int) -> pa.Table:
        return _read_run(
            fs,
            paths[i],
            footers[i],
            schema,
            key_filter,
            dictionaries=dictionaries,
            partial=partial,
            positions=vectors[i] if vectors else None,
        )

    if len(paths) <= 1 or not concurrent:
        return [read(i) for i in range(len(paths))]
    workers = min(len(paths), max(1, pa.cpu_count()))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(read, range(len(paths))))


@dataclass(frozen=True)
class _MergeRead:
    """What a merge read of one table does to each bucket: the same for all its buckets."""

    storage: Storage
    schema: pa.Schema
    primary_key: Sequence[str]
    sequence_column: str | None
    #: Columns loaded from the runs (output, keys, sequence, filtered columns).
    read: pa.Schema
    key_predicates: list[Predicate]
    key_filter: pc.Expression | None
    #: Applied after the merge (non-key filters).
    expression: pc.Expression | None
    out: list[str]
    include_row_kind: bool
    ordered: bool
    #: As given: a resolved prefix takes every filter, pushed into its plain scan.
    row_filter: RowFilter = None

    @classmethod
    def of(
        cls,
        location: Location,
        schema: pa.Schema,
        primary_key: Sequence[str],
        *,
        sequence_column: str | None,
        columns: Sequence[str] | None,
        row_filter: RowFilter,
        include_row_kind: bool,
        ordered: bool,
    ) -> _MergeRead:
        predicates, expression = _split_filter(row_filter, schema)
        _subschema(schema, [*(columns or ()), *(p.column for p in predicates)])  # fail early
        key_predicates = [p for p in predicates if p.column in primary_key]
        read = _subschema(
            schema,
            _merge_columns(
                schema,
                columns,
                primary_key,
                sequence_column,
                predicates=predicates,
                expression_given=isinstance(row_filter, pc.Expression),
            ),
        )
        out = list(columns) if columns is not None else list(schema.names)
        if include_row_kind:
            out.append(ROW_KIND_COLUMN)
        return cls(
            storage=storage_for(location),
            schema=schema,
            primary_key=primary_key,
            sequence_column=sequence_column,
            read=read,
            key_predicates=key_predicates,
            key_filter=to_expression(key_predicates, schema),
            expression=expression,
            out=out,
            include_row_kind=include_row_kind,
            ordered=ordered,
            row_filter=row_filter,
        )

    def bucket(self, runs: Sequence[DataFile | str], *, concurrent: bool) -> pa.Table | None:
        """The rows of one bucket (None when no run can hold a match).

        Without a resolved prefix: its runs merged, as ever. With one and no request for
        deletes: the resolved files scanned minus their vectors and the pending runs merged
        against them (:meth:`_with_tail`, design D6). A caller that wants winning deletes kept
        (a change feed, DML, a fold keeping deletes) gets the whole bucket merged with the
        resolved files' vectors IGNORED: every mark a resolver writes is a row the merge drops
        anyway, while masking first would drop the tombstones that stop older replays.
        """
        resolved = _resolved_count(runs)
        if resolved == 0:
            return self._merged(runs, concurrent=concurrent, resolved_vectors=True)
        later = runs[resolved:]
        if self.include_row_kind or any(isinstance(r, DataFile) and r.resolved for r in later):
            return self._merged(runs, concurrent=concurrent, resolved_vectors=False)
        resolved_files = [r for r in runs[:resolved] if isinstance(r, DataFile)]
        return self._with_tail(resolved_files, later, concurrent=concurrent)

    def _vectors(
        self, runs: Sequence[DataFile | str], *, resolved: bool
    ) -> list[npt.NDArray[np.uint64] | None]:
        """Each run's marked positions; a resolved file's only when ``resolved`` (a pending
        run's vector, which no resolver writes, is always masked before the merge)."""
        return [
            _positions(self.storage, run.vector)
            if isinstance(run, DataFile)
            and run.vector is not None
            and (resolved or not run.resolved)
            else None
            for run in runs
        ]

    def _merged(
        self, runs: Sequence[DataFile | str], *, concurrent: bool, resolved_vectors: bool
    ) -> pa.Table | None:
        """Every run merged (the merge path of a bucket with pending runs)."""
        kept = [run for run in runs if not _skip(run, self.key_predicates, self.schema)]
        paths = [_path(self.storage, run) for run in kept]
        vectors = self._vectors(kept, resolved=resolved_vectors)
        compared = [*self.primary_key, *([self.sequence_column] if self.sequence_column else [])]
        tables = _read_runs(
            self.storage.filesystem,
            paths,
            self.read,
            self.key_filter,
            compared=compared,
            concurrent=concurrent,
            vectors=vectors,
        )
        if not tables:
            return None
        merged = merge_runs(
            tables,
            self.primary_key,
            self.sequence_column,
            keep_deletes=self.include_row_kind,
            ordered=self.ordered,
        )
        if self.expression is not None:  # it may name any column, decoded or not
            merged = _decode_dictionaries(merged, self.read).filter(self.expression)
        out = self.out
        if self.include_row_kind and UNSET_COLUMN in merged.column_names:
            out = [*out, UNSET_COLUMN]  # a compaction must keep what it could not fill
        result = _decode_dictionaries(merged.select(out), self.read)
        return result if self.include_row_kind else _as_declared(result, self.read)

    def _with_tail(
        self,
        resolved: Sequence[DataFile],
        tail: Sequence[DataFile | str],
        *,
        concurrent: bool,
        scan: Sequence[DataFile] | None = None,
        emit: bool = True,
    ) -> pa.Table:
        """A bucket with a resolved prefix: its live rows scanned minus vectors, filters
        pushed down, and the pending runs (none when the bucket is fully resolved) merged alone
        and applied by the rules of :mod:`catalog.files.tail`.

        ``scan`` (default: every resolved file) is the part of the prefix whose live rows this
        read returns, and ``emit`` whether it also returns the tail's winners: one bucket
        read as several tasks (Spark) scans a group of resolved files in each, and only one
        emits the winners. Lookups always cover every resolved file."""
        key = list(self.primary_key)
        pending = self._tail_rows(tail, concurrent=concurrent)
        whole, partial = split_partial(pending, key)
        winners = merge_runs([whole], key, self.sequence_column, keep_deletes=True)
        found = None
        if winners.num_rows and self.sequence_column not in (None, *key):
            lookup = [*key, str(self.sequence_column)]
            found = self._resolved_rows(resolved, winners, _subschema(self.read, lookup))
        beats = beating(winners, found, key, self.sequence_column)
        upsert = pc.equal(winners.column(ROW_KIND_COLUMN), ROW_KIND_UPSERT)
        emitted = winners.filter(pc.and_(pa.array(beats), upsert))
        decided = pa.concat_tables(
            [winners.filter(pa.array(beats)).select(key), partial.select(key)]
        )
        pieces = [self._live(resolved if scan is None else scan, decided)]
        if emit:
            pieces.append(self._after_merge(emitted))
        if partial.num_rows and emit:
            older = self._resolved_rows(resolved, partial, self.read)
            target = partial.schema
            older = _with_unset(older).select(target.names).cast(target)
            pieces.append(
                self._after_merge(merge_runs([older, partial], key, self.sequence_column))
            )
        result = pa.concat_tables(pieces)
        return result.sort_by([(k, "ascending") for k in key]) if self.ordered else result

    def _tail_rows(self, tail: Sequence[DataFile | str], *, concurrent: bool) -> pa.Table:
        """Every row of the pending runs that a key filter keeps, oldest run first, with row
        kind and the unset-columns list."""
        kept = [run for run in tail if not _skip(run, self.key_predicates, self.schema)]
        tables = _read_runs(
            self.storage.filesystem,
            [_path(self.storage, run) for run in kept],
            self.read,
            self.key_filter,
            concurrent=concurrent,
            vectors=self._vectors(kept, resolved=True),
        )
        target = _run_schema(self.read, [], partial=True)
        if not tables:
            return target.empty_table()
        return pa.concat_tables([_with_unset(t).cast(target) for t in tables])

    def _resolved_rows(
        self, resolved: Sequence[DataFile], keys: pa.Table, schema: pa.Schema
    ) -> pa.Table:
        """The resolved files' rows of ``keys``, vectors IGNORED (tombstones and superseded
        rows too), as ``schema`` + row kind: a key lookup, pruned by row-group statistics when
        the key is one column (files are key-sorted)."""
        key = list(self.primary_key)
        lookup = None
        if len(key) == 1:
            values = pc.unique(keys.column(key[0]).combine_chunks())
            field = pc.field(key[0])
            bounds = pc.min_max(values)
            lookup = (field >= bounds["min"]) & (field <= bounds["max"]) & field.isin(values)
        tables = _read_runs(
            self.storage.filesystem,
            [_path(self.storage, file) for file in resolved],
            schema,
            lookup,
            concurrent=False,
        )
        target = _run_schema(schema, [], partial=False)
        rows = (
            pa.concat_tables(
                [
                    t.drop_columns([c for c in (UNSET_COLUMN,) if c in t.column_names])
                    for t in tables
                ]
            )
            if tables
            else target.empty_table()
        )
        rows = rows.cast(target)
        return rows.filter(pa.array(key_mask(rows, keys, key)))

    def _live(self, resolved: Sequence[DataFile], decided: pa.Table) -> pa.Table:
        """The resolved files' live rows minus the keys the tail decided, every filter pushed
        down (a filtered-out row cannot matter: the tail rules decide by key)."""
        key = self.primary_key
        also = None
        if decided.num_rows and len(key) == 1:  # dropped inside the scan, on its threads
            also = ~pc.field(key[0]).isin(pc.unique(decided.column(key[0]).combine_chunks()))
        batches = read_files(
            self.storage,
            resolved,
            self.schema,
            columns=self.read.names,
            row_filter=self.row_filter,
            also=also,
        )
        live = pa.Table.from_batches(list(batches), schema=self.read)
        if decided.num_rows and also is None:
            live = live.filter(pa.array(~key_mask(live, decided, key)))
        return live.select(self.out)

    def _after_merge(self, merged: pa.Table) -> pa.Table:
        """Merged tail rows as the output: non-key filters applied after the merge."""
        if self.expression is not None:
            merged = merged.filter(self.expression)
        return _as_declared(merged.select(self.out), self.read)


def _resolved_count(runs: Sequence[DataFile | str]) -> int:
    """How many leading runs are resolved files (design R1: the resolved prefix)."""
    count = 0
    for run in runs:
        if not (isinstance(run, DataFile) and run.resolved):
            break
        count += 1
    return count


def _with_unset(table: pa.Table) -> pa.Table:
    if UNSET_COLUMN in table.column_names:
        return table
    return table.append_column(_UNSET_FIELD, pa.nulls(table.num_rows, UNSET_TYPE))


def _as_declared(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Winners under the table's own fields again (runs are read all-nullable, for deletes).

    Only the declared nullability comes back; values are not checked, because a partial change
    whose column was found in no older run legitimately stays null until a later merge fills it.
    """
    fields = [
        schema.field(n) if n in schema.names else table.schema.field(n) for n in table.column_names
    ]
    return pa.Table.from_arrays(
        table.columns, schema=pa.schema(fields, metadata=table.schema.metadata)
    )


def _batches(merged: pa.Table | None, batch_size: int) -> list[pa.RecordBatch]:
    return [] if merged is None else merged.to_batches(max_chunksize=batch_size)


def read_merged(
    location: Location,
    runs: Sequence[DataFile | str],
    schema: pa.Schema,
    primary_key: Sequence[str],
    *,
    sequence_column: str | None = None,
    columns: Sequence[str] | None = None,
    row_filter: RowFilter = None,
    include_row_kind: bool = False,
    ordered: bool = False,
    batch_size: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Merge-on-read of ONE bucket: its sorted runs, oldest first (snapshot order).

    For each key the change from the newest run wins, or with ``sequence_column`` the change
    with the highest sequence value (ties: the newer run); a winning delete removes the key.
    With ``include_row_kind`` the output keeps winning deletes and the row-kind column (a change
    feed, or a compaction that must carry deletes). With ``ordered`` rows come in key order;
    otherwise in run order, key-sorted within each run. See the module doc for filters and the
    memory bound.
    """
    for batches in read_merged_buckets(  # one bucket: read alone, its runs concurrently
        location,
        [runs],
        schema,
        primary_key,
        sequence_column=sequence_column,
        columns=columns,
        row_filter=row_filter,
        include_row_kind=include_row_kind,
        ordered=ordered,
        batch_size=batch_size,
    ):
        yield from batches


def read_tail_group(
    location: Location,
    resolved: Sequence[DataFile],
    tail: Sequence[DataFile | str],
    schema: pa.Schema,
    primary_key: Sequence[str],
    *,
    scan: Sequence[DataFile],
    winners: bool,
    sequence_column: str | None = None,
    columns: Sequence[str] | None = None,
    row_filter: RowFilter = None,
    batch_size: int = DEFAULT_BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """One part of a bucket with a resolved prefix and pending runs (design D6, for engines
    that read a bucket as several tasks): the live rows of ``scan`` (some of the ``resolved``
    files) the ``tail`` leaves standing, plus, with ``winners``, the tail's winning rows. The
    tasks of one bucket each take a group of its resolved files, one of them ``winners``; each
    merges the (small) tail and looks its keys up in every resolved file. Together they read
    what :func:`read_merged` reads of the whole bucket."""
    merge = _MergeRead.of(
        location,
        schema,
        primary_key,
        sequence_column=sequence_column,
        columns=columns,
        row_filter=row_filter,
        include_row_kind=False,
        ordered=False,
    )
    rows = merge._with_tail(resolved, tail, concurrent=True, scan=scan, emit=winners)
    yield from _batches(rows, batch_size)


def read_merged_buckets(
    location: Location,
    buckets: Sequence[Sequence[DataFile | str]],
    schema: pa.Schema,
    primary_key: Sequence[str],
    *,
    sequence_column: str | None = None,
    columns: Sequence[str] | None = None,
    row_filter: RowFilter = None,
    include_row_kind: bool = False,
    ordered: bool = False,
    batch_size: int = DEFAULT_BATCH_ROWS,
) -> Generator[list[pa.RecordBatch], None, None]:
    """Merge-on-read of several buckets of one table: each bucket's batches, in order.

    Each bucket reads as :func:`read_merged` would read it. Buckets are read ahead on a thread
    pool of ``pyarrow.cpu_count()`` workers (at most :data:`MAX_BUCKETS_AHEAD`), each decoding
    and merging a whole bucket (decoding and the merge kernel run without the GIL), so merging
    one bucket overlaps with decoding the next. Memory: up to workers + 1 buckets at once (those
    in flight and the one yielded). With fewer buckets than workers, or one worker, buckets are
    read one at a time, each reading its runs concurrently instead.
    """
    merge = _MergeRead.of(
        location,
        schema,
        primary_key,
        sequence_column=sequence_column,
        columns=columns,
        row_filter=row_filter,
        include_row_kind=include_row_kind,
        ordered=ordered,
    )
    workers = max(1, min(pa.cpu_count(), MAX_BUCKETS_AHEAD))
    if workers < 2 or len(buckets) < workers:
        for runs in buckets:
            yield _batches(merge.bucket(runs, concurrent=True), batch_size)
        return
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lakestream-merge")
    try:
        todo = iter(buckets)
        pending = deque(
            pool.submit(merge.bucket, runs, concurrent=False) for runs in islice(todo, workers)
        )
        while pending:
            merged = pending.popleft().result()
            for runs in islice(todo, 1):
                pending.append(pool.submit(merge.bucket, runs, concurrent=False))
            yield _batches(merged, batch_size)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
