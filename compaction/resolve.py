"""Resolve a CDC bucket: mark what its pending runs replace, rewrite no data (design D4).

A resolve task names every file of one bucket at its base version, in chain order. The files
flagged ``resolved`` at its head are the resolved prefix; the rest are pending runs
(:func:`compaction.planner.pending_runs`). The resolver builds the bucket's key index
(:class:`catalog.BucketIndex`) from the prefix's key, sequence and row-kind columns and vectors,
applies the pending runs to it oldest first, and turns the marks into one new vector per
touched file (its old marks and the new ones; inline up to the table's
``vectors.inline-max-bytes``, else in one Puffin vector file). The commit
(:mod:`compaction.rewrite`) names every entry again: touched files with their new vector,
resolved runs flagged. Nothing else changes, so reads are unchanged by it.

A run holding partial rows (``_ls_unset``: columns a change left out) is rewritten filled
(:func:`catalog.files.partial.take_filled`), so a resolved file never holds a live partial row.
It is filled exactly as a merge of the whole bucket at the base would fill it: from the rows
the index holds for its keys (the highest resolved row: nothing below it can be the row a
merge takes a value from), the run, and every later pending run of the task (a stale change
of lower sequence in a later run sorts before the partial row and ends or feeds its search in
the merge, so it must here too). The rewritten run is a new file with the same rows in the
same order: the marks computed for the run apply to it unchanged.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from catalog import (
    ROW_KIND_COLUMN,
    UNSET_COLUMN,
    BucketIndex,
    DataFile,
    TableMeta,
    index_columns,
)
from catalog.files import (
    WriteOptions,
    has_partial_rows,
    inline_max_bytes,
    load_vector,
    store_vectors,
    take_filled,
    vector_positions,
    write_data_file,
)

Positions = npt.NDArray[np.int64]


@dataclass
class Resolution:
    """What a resolve wrote and what its commit names."""

    entries: tuple[DataFile, ...]
    """Every file of the bucket, in chain order, as the commit adds it again (or its rewrite)."""
    written: tuple[str, ...] = ()
    """Files written for the commit (vector files, rewritten runs): deleted if it fails."""
    rewritten: dict[str, DataFile] = field(default_factory=dict)
    """Partial runs replaced by their filled rewrite: old path -> new file."""
    runs_resolved: int = 0
    rows_marked: int = 0
    vector_bytes: int = 0
    bytes_written: int = 0
    index_rows: int = 0

    @property
    def changed(self) -> bool:
        return self.runs_resolved > 0


def resolved_prefix(files: Sequence[DataFile]) -> int:
    """How many leading files are flagged resolved (R1: only a prefix counts)."""
    return next((i for i, f in enumerate(files) if f.resolved is not True), len(files))


def resolve_bucket(
    meta: TableMeta,
    files: Sequence[DataFile],
    *,
    partition: list[tuple[str, object]],
    bucket: int,
    options: WriteOptions,
) -> Resolution:
    """Resolve the pending runs of one bucket (``files``: every file, chain order). Writes the
    vector file and rewritten runs; on any failure deletes what it wrote and re-raises."""
    resolver = _Resolver(meta, tuple(files), partition, bucket, options)
    try:
        return resolver.run()
    except BaseException:
        meta.files.discard(resolver.written)
        raise


class _Resolver:
    def __init__(
        self,
        meta: TableMeta,
        files: tuple[DataFile, ...],
        partition: list[tuple[str, object]],
        bucket: int,
        options: WriteOptions,
    ) -> None:
        self.meta = meta
        self.files = files
        self.partition = partition
        self.bucket = bucket
        self.options = options
        self.written: list[str] = []
        self.old = [_positions(meta, f) for f in files]
        # whole files read for filling (a rewritten run: its filled rows); partial runs are rare
        # and small, but a fill reads the files the index points into whole
        self.full: dict[int, pa.Table] = {}
        self.columns = _IndexRead(meta)

    def run(self) -> Resolution:
        prefix = resolved_prefix(self.files)
        index = BucketIndex.build(
            self.meta.primary_key,
            self.meta.sequence_column,
            [self.columns.read(f) for f in self.files[:prefix]],
            self.old[:prefix],
        )
        result = Resolution(entries=self.files)
        marks: dict[int, set[int]] = {}
        for ordinal in range(prefix, len(self.files)):
            rows = self.columns.read(self.files[ordinal], partial=True)
            if has_partial_rows(rows):
                self._rewrite(index, rows, ordinal, result)
            for f, positions in index.apply_run(rows).items():
                marks.setdefault(f, set()).update(positions.tolist())
            result.runs_resolved += 1
        result.index_rows = len(index)
        self._store(marks, result)
        return result

    def _rewrite(self, index: BucketIndex, rows: pa.Table, ordinal: int, out: Resolution) -> None:
        """Replace a partial run by its filled rows in a new file (same rows, same order)."""
        run = self.files[ordinal]
        full = self._filled(index, rows, ordinal)
        self.full[ordinal] = full
        new = write_data_file(
            full,
            self.meta.files,
            partition=self.partition,
            bucket=self.bucket,
            schema_id=self.meta.current_schema_id,
            sorted_by=self.meta.primary_key,
            options=self.options,
            field_ids=self.meta.field_ids,
        )
        self.written.append(new.path)
        out.rewritten[run.path] = new
        out.bytes_written += new.size_bytes

    def _read(self, ordinal: int) -> pa.Table:
        if ordinal not in self.full:
            self.full[ordinal] = _read_full(self.meta, self.files[ordinal].path)
        return self.full[ordinal]

    def _filled(self, index: BucketIndex, rows: pa.Table, ordinal: int) -> pa.Table:
        """The run's rows, every row in place, its partial rows filled as a merge of the bucket
        fills them: from the index's rows of its keys, the run and the later pending runs."""
        data = self._read(ordinal)
        later = [_like(self._read(i), data.schema) for i in range(ordinal + 1, len(self.files))]
        found = index.lookup(rows.select(list(self.meta.primary_key)))
        held = np.unique(found[found >= 0])
        ordinals, positions = index.locations()
        older: list[pa.Table] = []
        for source in np.unique(ordinals[held]).tolist():
            at = positions[held[ordinals[held] == source]]  # rows of held keys in this file
            older.append(_like(self._read(source).take(pa.array(at)), data.schema))
        merged = pa.concat_tables([*older, data, *later])
        first = sum(t.num_rows for t in older)
        mine = np.arange(first, first + data.num_rows, dtype=np.int64)
        out = take_filled(merged, mine, self.meta.primary_key, self.meta.sequence_column)
        unset = out.schema.get_field_index(UNSET_COLUMN)
        field_ = out.schema.field(unset)
        return out.set_column(unset, field_, pa.nulls(out.num_rows, field_.type))

    def _store(self, marks: dict[int, set[int]], result: Resolution) -> None:
        """One new vector per touched file (old marks and new), and the entries to commit."""
        storage = self.meta.files
        paths = [result.rewritten.get(f.path, f).path for f in self.files]
        added = {i: m - _as_set(self.old[i]) for i, m in marks.items()}
        vectors = {paths[i]: _union(self.old[i], m) for i, m in added.items() if m}
        result.rows_marked = sum(len(m) for m in added.values())
        refs = store_vectors(
            storage,
            vectors,
            partition=self.partition,
            bucket=self.bucket,
            inline_max=inline_max_bytes(self.meta.properties),
        )
        vector_files = sorted({r.path for r in refs.values() if r.path is not None})
        self.written += vector_files
        result.written = tuple(self.written)
        inline = sum(len(base64.b64decode(r.inline)) for r in refs.values() if r.inline)
        result.vector_bytes = inline + sum(r.length or 0 for r in refs.values())
        result.bytes_written += inline + sum(storage.size(p) or 0 for p in vector_files)
        entries = []
        for f in self.files:
            entry = result.rewritten.get(f.path, f)
            update: dict[str, object] = {"resolved": True}
            if entry.path in refs:
                update["vector"] = refs[entry.path]
            entries.append(entry.model_copy(update=update))
        result.entries = tuple(entries)


def _positions(meta: TableMeta, file: DataFile) -> Positions | None:
    if file.vector is None:
        return None
    return vector_positions(load_vector(meta.files, file.vector)).astype(np.int64)


def _as_set(positions: Positions | None) -> set[int]:
    return set() if positions is None else set(positions.tolist())


def _union(old: Positions | None, added: set[int]) -> list[int]:
    return sorted(_as_set(old) | added)


@dataclass(frozen=True)
class _IndexRead:
    """Reads the columns the index needs from a file: key, sequence, row kind (and the
    unset-columns list of runs, which says whether a run holds partial rows)."""

    meta: TableMeta

    def read(self, file: DataFile, *, partial: bool = False) -> pa.Table:
        storage = self.meta.files
        wanted = index_columns(self.meta.primary_key, self.meta.sequence_column)
        system = [ROW_KIND_COLUMN, *([UNSET_COLUMN] if partial else [])]
        with pq.ParquetFile(storage.path(file.path), filesystem=storage.filesystem) as parquet:
            names = parquet.schema_arrow.names
            return parquet.read(columns=[*wanted, *(c for c in system if c in names)])


def _read_full(meta: TableMeta, path: str) -> pa.Table:
    storage = meta.files
    return pq.read_table(storage.path(path), filesystem=storage.filesystem)


def _like(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns (missing ones null: an older file without the row
    kind or unset list), in its order and types."""
    columns = [
        table.column(f.name).cast(f.type)
        if f.name in table.column_names
        else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    if ROW_KIND_COLUMN in schema.names and ROW_KIND_COLUMN not in table.column_names:
        at = schema.get_field_index(ROW_KIND_COLUMN)
        columns[at] = pa.array(np.zeros(table.num_rows, dtype=np.int8)).cast(schema.field(at).type)
    return pa.Table.from_arrays(columns, schema=schema)
