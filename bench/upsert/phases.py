"""Where one lakestream upsert spends its time: ``Table.upsert`` done step by step.

``Table.upsert`` is one call; to see which part of it costs what, this pass repeats exactly its
steps (for a table whose partitioning is the key's hash bucket only: no moved-key lookup, no
conflict, so no retry) with the package's own functions and times each one. It takes its turn
in the main loop on a table of its own, so its phases are measured under the same load as the
systems compared, and its total can be checked against plain ``Table.upsert``.
"""

from __future__ import annotations

import pyarrow as pa

from bench.common import PRIMARY_KEY, SCHEMA, PhaseClock
from catalog import Catalog, CommitOp, CommitRequest, FileAction, FileOp, PartitionCommit, Table
from catalog.files.writer import prepare_merge_run, write_data_file
from catalog.meta import TableMeta
from catalog.model import TableCommit
from catalog.writes import PartitionSlice, split_partitions, upserts

#: Phase name -> what it covers, in the order ``Table.upsert`` runs them.
PHASES = {
    "refresh": "reload table metadata (`Table.refresh`: 2 catalog queries)",
    "version": "read the head version (`current_version`: 1 catalog query)",
    "conform": "check/cast to the table schema, add the row kind (`writes.upserts`)",
    "bucketing": "murmur3 bucket per key, split rows by bucket (`split_partitions`)",
    "prepare": "per bucket: last change per key, sort by key (`prepare_merge_run`)",
    "write": "per bucket: Parquet+zstd, stats, fsync, rename (`write_data_file`)",
    "commit": "the catalog transaction (`Catalog.commit`)",
}


class _Clock(PhaseClock):
    """Adds the wall time of each step to its phase; one entry per phase and upsert."""

    def __init__(self) -> None:
        super().__init__()
        self.times: dict[str, list[float]] = {name: [] for name in PHASES}

    def close_upsert(self) -> None:
        for name in PHASES:
            self.times[name].append(self.seconds.pop(name, 0.0))


class PhasedUpserter:
    """A CDC table upserted step by step; ``clock.times`` holds each phase's seconds."""

    name = "lakestream, phase-timed"
    budgeted = False
    history_start = 0

    def __init__(self, catalog: Catalog, table_name: str, buckets: int) -> None:
        self.catalog = catalog
        self.table = catalog.create_table(
            table_name, SCHEMA, primary_key=PRIMARY_KEY, hash_buckets=buckets
        )
        self.clock = _Clock()

    def before(self, index: int) -> None:
        pass

    def upsert(self, batch: pa.Table) -> None:
        _upsert(self.clock, self.catalog, self.table, batch)
        self.clock.close_upsert()

    def read(self) -> pa.Table:
        return self.table.scan().to_arrow()


def _upsert(clock: _Clock, catalog: Catalog, table: Table, batch: pa.Table) -> None:
    clock.run("refresh", table.refresh)
    meta = table.meta
    base = clock.run("version", table.current_version)
    changes = clock.run("conform", upserts, meta, batch)
    parts = clock.run("bucketing", lambda: list(split_partitions(meta, changes)))
    commits = tuple(_write_run(clock, meta, part) for part in parts)
    request = CommitRequest(
        tables=(
            TableCommit(table=table.name, op=CommitOp.MERGE, partitions=commits, base_version=base),
        )
    )
    clock.run("commit", catalog.commit, request, known={table.name: meta})


def _write_run(clock: _Clock, meta: TableMeta, part: PartitionSlice) -> PartitionCommit:
    run = clock.run("prepare", prepare_merge_run, part.rows, meta.primary_key)
    file = clock.run(
        "write",
        write_data_file,
        run,
        meta.location,
        partition=part.values,
        bucket=part.bucket if part.bucket is not None else 0,
        schema_id=meta.current_schema_id,
        sorted_by=meta.primary_key,
    )
    return PartitionCommit(
        partition_desc=part.desc, ops=(FileOp(action=FileAction.ADD, file=file),)
    )
