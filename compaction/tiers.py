"""Tiers 1 and 2 of design D8: rewrite a stretch of a CDC bucket's resolved files, compacted.

A ``fold-resolved`` task names consecutive resolved files of one bucket (tier 1: small files;
tier 2: one file whose vector marks too many rows). They are read whole, ignoring their
vectors, and of their rows the output keeps the live ones (unmarked: by R2 exactly the rows
that count) and the delete rows (tombstones: marked, but a merge that ignores vectors - the
whole-bucket fold, the tail merge of pending runs - needs them to keep an older row or a
stale replay of the key out). Of the kept rows of one key only the newest stays (the read
kernel's rule, :func:`catalog.files.last_change_per_key`): by I1 a live row is its key's winner
among every resolved row, and a tombstone below another tombstone decides nothing. The output
is two key-sorted resolved files holding one row per key between them: the live rows, with no
vector, and the tombstones, every row marked by the file's own vector. They are kept apart so
that the planner can tell them: a live file carries no marks until later runs supersede its
rows, and a file whose row-kind statistics say it holds only deletes has nothing tier 2 could
drop (:func:`compaction.planner.worn_resolved`), so no rewrite is planned again and again. The
bucket keeps R1, R2 and I1 (the highest resolved row of each key is unchanged). A task whose
stretch starts the bucket of a table without a sequence column drops the tombstones too
(:func:`compaction.planner.tier_drops_deletes`).

Pure file work: the commit (:mod:`compaction.rewrite`) names every file of the bucket again,
the output in the stretch's place.
"""

from __future__ import annotations

import base64
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

    outputs: tuple[DataFile, ...]
    """The stretch's replacement, resolved: its live rows (no vector), then its tombstones
    (every row marked), each file only when it has rows."""
    written: tuple[str, ...]
    """Files written for the commit (data files, vector file): deleted if it fails."""
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
    """Rewrite ``stretch`` (consecutive resolved files, chain order) as resolved files: one of
    its live rows and one of its tombstones. On any failure deletes what it wrote and
    re-raises."""
    kept = _kept_rows(meta, stretch, drop_deletes=drop_deletes)
    rows_in = sum(f.row_count for f in stretch)
    deletes = pc.equal(kept.column(ROW_KIND_COLUMN), ROW_KIND_DELETE)
    live, tombstones = kept.filter(pc.invert(deletes)), kept.filter(deletes)
    writer = _Writer(meta, partition, bucket, options)
    try:
        outputs = [writer.write(live)] if live.num_rows else []
        if tombstones.num_rows:
            outputs.append(writer.write(tombstones, marked=True))
    except BaseException:
        meta.files.discard(writer.written)
        raise
    return TierFold(
        outputs=tuple(outputs),
        written=tuple(writer.written),
        bytes_written=writer.bytes_written,
        rows_dropped=rows_in - kept.num_rows,
        tombstones=tombstones.num_rows,
    )


def _kept_rows(meta: TableMeta, stretch: Sequence[DataFile], *, drop_deletes: bool) -> pa.Table:
    """The stretch's live rows and tombstones, newest per key, in key order. Read with every
    non-key column nullable, as runs are (``catalog.writes.run_schema``): a tombstone carries
    only its key, so a column the table declares required is null in it."""
    fields = [f if f.name in meta.primary_key else f.with_nullable(True) for f in meta.schema]
    schema = pa.schema([*fields, pa.field(ROW_KIND_COLUMN, pa.int8())])
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


class _Writer:
    """Writes the tier's files, remembering what it wrote (for cleanup) and how many bytes."""

    def __init__(
        self,
        meta: TableMeta,
        partition: list[tuple[str, object]],
        bucket: int,
        options: WriteOptions,
    ) -> None:
        self.meta = meta
        self.partition = partition
        self.bucket = bucket
        self.options = options
        self.written: list[str] = []
        self.bytes_written = 0

    def write(self, rows: pa.Table, *, marked: bool = False) -> DataFile:
        """One key-sorted resolved file of ``rows``; ``marked``: its vector marks every row (the
        tombstones' file: dead rows a merge that ignores vectors still needs)."""
        meta = self.meta
        output = write_data_file(
            rows,
            meta.files,
            partition=self.partition,
            bucket=self.bucket,
            schema_id=meta.current_schema_id,
            sorted_by=meta.primary_key,
            options=self.options,
            field_ids=meta.field_ids,
        )
        self.written.append(output.path)
        self.bytes_written += output.size_bytes
        update: dict[str, object] = {"resolved": True}
        if marked:
            refs = store_vectors(
                meta.files,
                {output.path: range(rows.num_rows)},
                partition=self.partition,
                bucket=self.bucket,
                inline_max=inline_max_bytes(meta.properties),
            )
            ref = refs[output.path]
            if ref.path is not None:
                self.written.append(ref.path)
                self.bytes_written += meta.files.size(ref.path) or 0
            else:
                self.bytes_written += len(base64.b64decode(ref.inline or ""))
            update["vector"] = ref
        return output.model_copy(update=update)
