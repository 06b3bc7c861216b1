"""Where a read of the steady-state table spends its time, bucket by bucket, phase by phase.

``bench.read.phases`` times the steps of ``Table.scan(...).to_arrow()`` for a table whose
buckets are all merge-on-read or all plain. Under a running compactor a version mixes both (a
bucket just compacted is one plain file; the others hold a base and a few runs), so this times
each bucket by its own kind with the same steps and the package's same functions.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from bench.read.phases import PHASES, _Clock, _conform, _decode_plain, _out_batches
from catalog import Table
from catalog.files.merge import merge_runs
from catalog.files.reader import _decode_dictionaries, _MergeRead, _read_runs

__all__ = ["PHASES", "read_phases"]


def read_phases(table: Table, version: int) -> dict[str, float]:
    """Seconds per phase of a full read of ``table`` at ``version`` (buckets one by one)."""
    clock = _Clock()
    scan = clock.run("plan", table.scan, version=version)
    meta = scan.meta
    runs_schema = pa.schema(  # as Scan reads runs: delete rows carry only their key
        [f if f.name in meta.primary_key else f.with_nullable(True) for f in meta.schema]
    )
    merge = _MergeRead.of(
        meta.location,
        runs_schema,
        meta.primary_key,
        sequence_column=meta.sequence_column,
        columns=None,
        row_filter=None,
        include_row_kind=False,
        ordered=False,
    )
    compared = [*meta.primary_key, *([meta.sequence_column] if meta.sequence_column else [])]
    batches: list[pa.RecordBatch] = []
    for part in scan.partitions():
        if not part.merge:
            plain = clock.run("decode", _decode_plain, meta.location, part.files, meta.schema)
            batches += clock.run("assemble", _conform, plain, scan.schema)
            continue
        paths = [str(Path(meta.location) / f.path) for f in part.files]
        runs = clock.run("decode", _read_runs, paths, merge.read, None, compared=compared)
        merged = clock.run("merge", merge_runs, runs, meta.primary_key, meta.sequence_column)
        merged = clock.run("strings", _decode_dictionaries, merged.select(merge.out), merge.read)
        batches += clock.run("assemble", _out_batches, merged, scan.schema)
    clock.run("assemble", pa.Table.from_batches, batches, schema=scan.schema)
    return clock.result()
