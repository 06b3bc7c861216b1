"""Where a full ``Table.scan(...).to_arrow()`` spends its time, for either layout.

``Scan.to_arrow`` is one call; these functions repeat its steps (for an unfiltered read of all
columns) with the package's own functions and time each one, so a missed goal can be traced to
decoding more rows, to the merge kernel, or to assembling the result. The merge-on-read steps are
those of the reader's private ``_MergeRead.bucket`` (decode the runs, merge, turn late strings
back into strings), called one by one because that is exactly what ``read_merged_buckets`` does;
re-implementing them here would time something else.

Here the buckets are read one after another (each bucket's runs decoded concurrently, as
``read_merged`` does), so each phase is timed alone; the scan itself gives each of
``pa.cpu_count()`` workers a whole bucket, overlapping one bucket's merge with another's decode,
so its wall time is below the sum of the phases.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from bench.common import PhaseClock
from catalog import DataFile, Table
from catalog.files.merge import merge_runs
from catalog.files.reader import (
    DEFAULT_BATCH_ROWS,
    _decode_dictionaries,
    _MergeRead,
    _path,
    _read_runs,
    read_files,
)

#: Phase name -> what it covers, in the order a scan runs them.
PHASES = {
    "plan": "reload metadata, resolve and plan the version (`Table.scan`: catalog queries)",
    "decode": "read and decode the Parquet files (runs: a bucket's runs on a thread pool)",
    "merge": "runs only: newest change per key, keep each run's winners (`merge_runs`)",
    "strings": "runs only: late strings (read as dictionaries) to strings, winners only",
    "assemble": "result batches, cast check, one Arrow table (`Table.from_batches`)",
    "total": "sum of the phases",
}


class _Clock(PhaseClock):
    def result(self) -> dict[str, float]:
        return {**self.seconds, "total": sum(self.seconds.values())}


def merged_phases(table: Table, version: int) -> dict[str, float]:
    """``Table.scan(version=...).to_arrow()`` of merge-on-read buckets, phase by phase.

    A bucket that plans as a plain scan (one compacted file, as under a running compactor) is
    timed by its own kind, with the same steps ``compacted_phases`` takes.
    """
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
        paths = [_path(merge.storage, f) for f in part.files]
        fs = merge.storage.filesystem
        runs = clock.run("decode", _read_runs, fs, paths, merge.read, None, compared=compared)
        merged = clock.run("merge", merge_runs, runs, meta.primary_key, meta.sequence_column)
        merged = clock.run("strings", _decode_dictionaries, merged.select(merge.out), merge.read)
        batches += clock.run("assemble", _out_batches, merged, scan.schema)
    clock.run("assemble", pa.Table.from_batches, batches, schema=scan.schema)
    return clock.result()


def compacted_phases(table: Table, version: int) -> dict[str, float]:
    """``Table.scan(version=...).to_arrow()`` of plain (compacted) buckets, phase by phase."""
    clock = _Clock()
    scan = clock.run("plan", table.scan, version=version)
    meta = scan.meta
    batches: list[pa.RecordBatch] = []
    for part in scan.partitions():
        batches += clock.run("decode", _decode_plain, meta.location, part.files, meta.schema)
    batches = clock.run("assemble", _conform, batches, scan.schema)
    clock.run("assemble", pa.Table.from_batches, batches, schema=scan.schema)
    return clock.result()


def _decode_plain(
    location: str, files: Sequence[DataFile], schema: pa.Schema
) -> list[pa.RecordBatch]:
    return list(read_files(location, files, schema))


def _out_batches(merged: pa.Table, schema: pa.Schema) -> list[pa.RecordBatch]:
    batches = merged.select(schema.names).to_batches(max_chunksize=DEFAULT_BATCH_ROWS)
    return _conform(batches, schema)


def _conform(batches: list[pa.RecordBatch], schema: pa.Schema) -> list[pa.RecordBatch]:
    """What ``Scan.to_batches`` does to every batch: cast unless the schema already matches."""
    return [b if b.schema.equals(schema) else b.cast(schema) for b in batches]
