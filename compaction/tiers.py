"""Tiers 1 and 2 of design D8: rewrite a stretch of a CDC bucket's resolved files as one.

A ``fold-resolved`` task names consecutive resolved files of one bucket (tier 1: small files;
tier 2: one file whose vector marks too many rows). They are read whole, ignoring their
vectors, and of their rows the output keeps the live ones (unmarked: by R2 exactly the rows
that count) and the delete rows (tombstones: marked, but a merge that ignores vectors - the
whole-bucket fold, the tail merge of pending runs - needs them to keep an older row or a
stale replay of the key out). Of the kept rows of one key only the newest stays (the read
kernel's rule, :func:`catalog.files.last_change_per_key`): by I1 a live row is its key's winner
among every resolved row, and a tombstone below another tombstone decides nothing. So the
output holds at most one row per key, sorted by key, and its own vector marks its tombstones:
it is resolved, and the bucket keeps R1, R2 and I1 (the highest resolved row of each key is
unchanged). A task whose stretch starts the bucket of a table without a sequence column drops
the tombstones too (:func:`compaction.planner.tier_drops_deletes`).

Pure file work: the commit (:mod:`compaction.rewrite`) names every file of the bucket again,
the output in the stretch's place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog import ROW_KIND_COLUMN, ROW_KIND_DELETE, ROW_KIND_UPSERT, DataFile, TableMeta
from catalog.files import (
    WriteOptions,
    inline_max_bytes,
    last_change_per_key,
    load_vector,
    read_whole_files,
    store_vectors,
    vector_positions,
    write_data_file,
)


@dataclass(frozen=True)
class TierFold:
    """What a tier wrote."""

    output: DataFile | None
    """The stretch's replacement (resolved, its vector marking its tombstones); None when no
    row survived."""
    written: tuple[str, ...]
    """Files written for the commit (data file, vector file): deleted if it fails."""
    bytes_written: int
    rows_dropped: int
    """Input rows left out: marked rows, and tombstones dropped or below a newer row."""
    tombstones: int


def fold_resolved(
    meta: TableMeta,
    stretch: Sequence[DataFile],
    *,
    drop_deletes: bool,
    partition: list[tuple[str, object]],
    bucket: int,
    options: WriteOptions,
) -> TierFold:
    """Rewrite ``stretch`` (consecutive resolved files, chain order) as one resolved file. On any
    failure deletes what it wrote and re-raises."""
    kept = _kept_rows(meta, stretch, drop_deletes=drop_deletes)
    rows_in = sum(f.row_count for f in stretch)
    if kept.num_rows == 0:
        return TierFold(None, (), 0, rows_in, 0)
    written: list[str] = []
    try:
        return _write(
            meta, kept, rows_in, written, partition=partition, bucket=bucket, options=options
        )
    except BaseException:
        meta.files.discard(written)
        raise


def _kept_rows(meta: TableMeta, stretch: Sequence[DataFile], *, drop_deletes: bool) -> pa.Table:
    """The stretch's live rows and tombstones, newest per key, in key order."""
    schema = meta.schema.append(pa.field(ROW_KIND_COLUMN, pa.int8()))
    pieces = []
    for file in stretch:
        data = read_whole_files(
            meta.files, [file.model_copy(update={"vector": None})], schema, meta.current_schema_id
        )
        kinds = pc.fill_null(data.column(ROW_KIND_COLUMN), ROW_KIND_UPSERT)
        data = data.set_column(schema.get_field_index(ROW_KIND_COLUMN), ROW_KIND_COLUMN, kinds)
        deletes = pc.equal(kinds, ROW_KIND_DELETE).to_numpy(zero_copy_only=False)
        keep = ~_marked(meta, file, data.num_rows) | deletes
        if drop_deletes:
            keep &= ~deletes
        pieces.append(data.filter(pa.array(keep)))
    rows = pa.concat_tables(pieces)
    newest = last_change_per_key(rows, meta.primary_key, meta.sequence_column)
    return rows.take(pa.array(newest))


def _marked(meta: TableMeta, file: DataFile, n: int) -> np.typing.NDArray[np.bool_]:
    marked = np.zeros(n, dtype=np.bool_)
    if file.vector is not None:
        marked[vector_positions(load_vector(meta.files, file.vector)).astype(np.int64)] = True
    return marked


def _write(
    meta: TableMeta,
    rows: pa.Table,
    rows_in: int,
    written: list[str],
    *,
    partition: list[tuple[str, object]],
    bucket: int,
    options: WriteOptions,
) -> TierFold:
    output = write_data_file(
        rows,
        meta.files,
        partition=partition,
        bucket=bucket,
        schema_id=meta.current_schema_id,
        sorted_by=meta.primary_key,
        options=options,
    )
    written.append(output.path)
    deletes = pc.equal(rows.column(ROW_KIND_COLUMN), ROW_KIND_DELETE).to_numpy(zero_copy_only=False)
    tombstones = np.flatnonzero(deletes)
    bytes_written = output.size_bytes
    update: dict[str, object] = {"resolved": True}
    if len(tombstones):
        refs = store_vectors(
            meta.files,
            {output.path: tombstones.tolist()},
            partition=partition,
            bucket=bucket,
            inline_max=inline_max_bytes(meta.properties),
        )
        ref = refs[output.path]
        if ref.path is not None:
            written.append(ref.path)
            bytes_written += meta.files.size(ref.path) or 0
        else:
            bytes_written += len(ref.inline or "")
        update["vector"] = ref
    return TierFold(
        output=output.model_copy(update=update),
        written=tuple(written),
        bytes_written=bytes_written,
        rows_dropped=rows_in - rows.num_rows,
        tombstones=len(tombstones),
    )
