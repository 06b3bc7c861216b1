"""The executor side: one input partition to Arrow batches of exactly the Spark schema.

Runs in Spark's Python workers with nothing but the partition: the files are read from the table
location with :func:`catalog.files.reader.read_files` (plain) or
:func:`catalog.files.reader.read_merged` (merge-on-read of one bucket), then conformed to the
Arrow form of the Spark schema, which Spark checks batch by batch: Spark's own types where the
table's are narrower or wider (unsigned integers, other timestamp units and zones, ``large_*``
strings, list field names). A value that does not fit - a timestamp with nanoseconds - fails the
task naming the column; it is never silently rounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from catalog.files import read_files, read_merged, read_tail_group
from catalog.logs import get_logger
from ingest.spark_read.errors import ColumnReadError
from ingest.spark_read.planning import LakestreamPartition


def _log() -> Any:
    # Fetched per call: this code runs on executors, and cached loggers do not pickle.
    return get_logger("lakestream.ingest.spark_read")


def read_partition(part: LakestreamPartition) -> Iterator[pa.RecordBatch]:
    """The rows of one input partition, filtered by the pushed predicates."""
    rows = 0
    for batch in _batches(part):
        rows += batch.num_rows
        yield conform(batch, part.spec.output)
    _log().debug(
        "lakestream partition read",
        table=part.spec.table,
        version=part.spec.version,
        partition=part.partition_desc,
        files=len(part.files),
        merge=part.merge,
        rows=rows,
    )


def _batches(part: LakestreamPartition) -> Iterator[pa.RecordBatch]:
    spec = part.spec
    row_filter = list(spec.predicates) or None
    if part.tail:
        return read_tail_group(
            spec.files(),
            part.resolved_files(),
            part.tail_files(),
            spec.schema,
            spec.primary_key,
            scan=part.data_files(),
            winners=part.winners,
            sequence_column=spec.sequence_column,
            columns=spec.columns,
            row_filter=row_filter,
        )
    if part.merge:
        return read_merged(
            spec.files(),
            part.data_files(),
            spec.schema,
            spec.primary_key,
            sequence_column=spec.sequence_column,
            columns=spec.columns,
            row_filter=row_filter,
        )
    return read_files(
        spec.files(), part.data_files(), spec.schema, columns=spec.columns, row_filter=row_filter
    )


def conform(batch: pa.RecordBatch, output: pa.Schema) -> pa.RecordBatch:
    """``batch`` (columns in output order) with exactly the types and names of ``output``."""
    columns = [_cast(batch.column(i), field) for i, field in enumerate(output)]
    return pa.RecordBatch.from_arrays(columns, schema=output)


def _cast(column: pa.Array, field: pa.Field) -> pa.Array:
    if column.type.equals(field.type):
        return column
    try:
        return column.cast(field.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise ColumnReadError(field.name, str(exc)) from exc
