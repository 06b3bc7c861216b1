"""Plans read through the columnar manifest (migration 0008) give back exactly what was
committed: paths the line format must protect, statistics with their types, commit order, and
the chains compactions start."""

from __future__ import annotations

import pyarrow as pa
import pytest

from catalog import Catalog, ColumnStats, CommitOp, DataFile, FileAction, FileOp, PartitionCommit
from tests.fixtures.commits import adds, file_names, rewrite

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("region", pa.string())])


def test_files_come_back_as_committed_whatever_their_paths_and_stats(catalog: Catalog):
    table = catalog.create_table("logs.odd", SCHEMA, partition_by=["region"])
    stats = {
        "id": ColumnStats(min=-(2**63), max=2**63 - 1, null_count=0),
        "region": ColumnStats(min='e"u\t1', max="ü\n", null_count=3),
        "score": ColumnStats(min=0.0, max=4.5),
    }
    paths = ["a\tb.parquet", "c\nd.parquet", '"q".parquet', "día=é/x.parquet", "plain.parquet"]
    files = [
        DataFile(path=p, size_bytes=10 + i, row_count=i, schema_id=0, stats=stats)
        for i, p in enumerate(paths)
    ]
    ops = tuple(FileOp(action=FileAction.ADD, file=f) for f in files)
    table.commit(CommitOp.APPEND, [PartitionCommit(partition_desc="region=eu", ops=ops)])

    plan = table.plan()

    assert plan.files == files
    assert plan.manifest.paths == paths and plan.file_count == 5
    assert plan.partitions[0].row_count == sum(range(5))


def test_appends_after_a_compaction_follow_its_whole_file_set(catalog: Catalog):
    table = catalog.create_table("logs.chain", SCHEMA, partition_by=["region"])
    for name in ("a", "b", "c"):
        table.commit(CommitOp.APPEND, [adds("region=eu", name)])
    base = table.current_version()
    table.commit(CommitOp.COMPACTION, [rewrite("region=eu", ["a", "b"], ["ab"])], base_version=base)
    table.commit(CommitOp.APPEND, [adds("region=eu", "d"), adds("region=us", "e")])

    plan = table.plan()

    assert [file_names(p.files) for p in plan.partitions] == [["c", "ab", "d"], ["e"]]
    assert file_names(table.plan(version=base).files) == ["a", "b", "c"]
