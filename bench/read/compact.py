"""Compaction of a whole CDC table, done the way a compactor would with the low-level API.

The bench needs the *same* table in both layouts. Compacting it in place (one COMPACTION commit
on top of the merge commits) keeps both readable through time travel, so the two reads differ
only in the layout of the files, never in data, table or catalog state.
"""

from __future__ import annotations

import pyarrow as pa

from catalog import CommitOp, FileAction, FileOp, PartitionCommit, Table
from catalog.files.reader import read_merged
from catalog.files.writer import write_data_file
from catalog.planning import PartitionScan


def compact(table: Table, base_version: int) -> int:
    """Fold every bucket's runs at ``base_version`` into one key-sorted file; the new version."""
    plan = table.plan(version=base_version)
    commits = [_compact_partition(table, part) for part in plan.partitions]
    result = table.commit(CommitOp.COMPACTION, commits, base_version=base_version)
    version = result.version_of(table.name)
    if version is None:
        raise RuntimeError(f"the compaction of {table.name} was discarded")
    return version


def _compact_partition(table: Table, part: PartitionScan) -> PartitionCommit:
    meta = table.meta
    # The bucket's oldest run is included, so winning deletes can be dropped (no row kind).
    merged = pa.Table.from_batches(
        list(read_merged(meta.location, part.files, meta.schema, meta.primary_key, ordered=True)),
        schema=meta.schema,
    )
    file = write_data_file(
        merged,
        meta.location,
        partition=tuple(part.values.items()),
        bucket=part.bucket if part.bucket is not None else 0,
        schema_id=meta.current_schema_id,
        sorted_by=meta.primary_key,
    )
    gone = [FileOp(action=FileAction.DELETE, file=f) for f in part.files]
    return PartitionCommit(
        partition_desc=part.partition_desc,
        ops=(*gone, FileOp(action=FileAction.ADD, file=file)),
    )
