"""lakestream: ``Table.commit(CommitOp.APPEND, ...)`` and ``Table.plan`` on the PostgreSQL catalog.

Files are made-up entries (paths, sizes and per-column statistics, as a writer would report
them): nothing is written to disk, so only the catalog is measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from bench.catalog_scale.sizes import PARTITION_COLUMN
from bench.catalog_scale.systems import Mode
from catalog import (
    Catalog,
    ColumnStats,
    CommitOp,
    DataFile,
    FileAction,
    FileOp,
    IdempotencyKey,
    PartitionCommit,
    Table,
)

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("value", pa.float64()),
        pa.field(PARTITION_COLUMN, pa.int32()),
    ]
)
BIG = "scale.big"
_ROWS = 10


def data_file(path: str, day: int) -> DataFile:
    stats = {
        "id": ColumnStats(min=0, max=_ROWS - 1, null_count=0),
        "value": ColumnStats(min=0.0, max=4.5, null_count=0),
        PARTITION_COLUMN: ColumnStats(min=day, max=day, null_count=0),
    }
    return DataFile(path=path, size_bytes=1_000, row_count=_ROWS, stats=stats)


def partition_commit(table: Table, day: int, names: list[str]) -> PartitionCommit:
    desc = table.meta.spec.desc({PARTITION_COLUMN: day})
    ops = tuple(
        FileOp(action=FileAction.ADD, file=data_file(f"data/{desc}/{name}", day)) for name in names
    )
    return PartitionCommit(partition_desc=desc, ops=ops)


class LakestreamSide:
    name = "lakestream"

    def __init__(self, catalog: Catalog, dsn: str) -> None:
        self._catalog = catalog
        self._dsn = dsn
        self._big: Table | None = None

    def create_tables(self, count: int) -> None:
        for i in range(count):
            self._catalog.create_table(f"many.t{i:05d}", SCHEMA, partition_by=[PARTITION_COLUMN])

    def build_big(self, partitions: int, files_per_partition: int, batch: int) -> None:
        table = self._catalog.create_table(BIG, SCHEMA, partition_by=[PARTITION_COLUMN])
        names = [f"f{i:04d}.parquet" for i in range(files_per_partition)]
        for first in range(0, partitions, batch):
            days = range(first, min(first + batch, partitions))
            table.commit(CommitOp.APPEND, [partition_commit(table, day, names) for day in days])
        self._big = table.refresh()

    def plan_full(self) -> int:
        """The plan as readers get it: every file's path, size, rows and statistics, in columns
        (``plan().files`` would also build a DataFile object per file, ~5 us each)."""
        return self._table().plan().file_count

    def plan_one(self, partition: int) -> int:
        table = self._table()
        desc = table.meta.spec.desc({PARTITION_COLUMN: partition})
        return table.plan(partitions=[desc]).file_count

    def _table(self) -> Table:
        if self._big is None:
            raise RuntimeError("build_big first")
        return self._big

    def writer_context(self, mode: Mode, writers: int, commits: int) -> LakestreamContext:
        name = f"scale.w_{mode}_{writers}"
        self._catalog.create_table(name, SCHEMA, partition_by=[PARTITION_COLUMN])
        return LakestreamContext(dsn=self._dsn, table=name, mode=mode)

    def committed(self, context: object) -> int:
        assert isinstance(context, LakestreamContext)
        return self._catalog.load_table(context.table).plan().file_count

    def close(self) -> None:
        """The catalog belongs to the caller (bench.common.bench_server closes it)."""


@dataclass(frozen=True)
class LakestreamContext:
    dsn: str
    table: str
    mode: Mode


class LakestreamWriter:
    """One writer process: its own catalog connection, one commit per file, keyed by batch."""

    def __init__(self, context: LakestreamContext, writer_index: int) -> None:
        self._catalog = Catalog.connect(context.dsn, create=False)
        self._table = self._catalog.load_table(context.table)
        self._day = context.mode.day_of(writer_index)
        self._writer_id = f"{context.table}-{writer_index}"  # a key is unique catalog-wide

    def commit(self, commit_id: int) -> None:
        part = partition_commit(self._table, self._day, [f"{self._writer_id}-{commit_id}.parquet"])
        self._table.commit(
            CommitOp.APPEND,
            [part],
            key=IdempotencyKey(writer_id=self._writer_id, batch_id=commit_id),
        )

    def recover(self) -> None:
        self._table.refresh()

    def close(self) -> None:
        self._catalog.close()


def open_writer(context: LakestreamContext, writer_index: int) -> LakestreamWriter:
    return LakestreamWriter(context, writer_index)
