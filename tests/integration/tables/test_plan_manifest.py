"""Plans read through the columnar manifest (migration 0008) give back exactly what was
committed: paths the line format must protect, statistics with their types, commit order, and
the chains compactions start, and the vectors and resolved flags of entries (migration 0012)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from catalog import (
    Catalog,
    ColumnStats,
    CommitOp,
    DataFile,
    FileAction,
    FileOp,
    PartitionCommit,
    VectorRef,
)
from catalog.snapshots import all_partition_heads, load_snapshots
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


def test_vectors_and_resolved_flags_come_back_in_plans_and_snapshots(catalog: Catalog):
    table = catalog.create_table("logs.marked", SCHEMA, partition_by=["region"])
    table.commit(CommitOp.APPEND, [adds("region=eu", "a", "b")])
    before = table.current_version()
    a, b = table.plan().files
    ref = VectorRef(cardinality=1, path="data/region=eu/dv-1.puffin", offset=4, length=30)
    inline = VectorRef(cardinality=2, inline="AAAAJNHTOWQ=")
    entries = [
        a.model_copy(update={"vector": ref, "resolved": True}),
        b.model_copy(update={"resolved": False}),
    ]
    ops = [FileOp(action=FileAction.DELETE, file=f) for f in (a, b)]
    ops += [FileOp(action=FileAction.ADD, file=f) for f in entries]
    table.commit(
        CommitOp.COMPACTION,
        [PartitionCommit(partition_desc="region=eu", ops=tuple(ops))],
        base_version=before,
    )
    marked = table.current_version()
    c = DataFile(path="c.parquet", size_bytes=1, row_count=2, vector=inline)
    table.commit(
        CommitOp.COMPACTION,
        [PartitionCommit(partition_desc="region=us", ops=(FileOp(action=FileAction.ADD, file=c),))],
        base_version=marked,
    )

    assert table.plan().files == [*entries, c]  # plans carry vectors; readers apply them
    assert table.plan(version=before).files == [a, b]  # time travel to before the vector
    with catalog.store.connection() as conn:
        heads = all_partition_heads(conn, table.meta.table_id, table.current_version())
        snapshots = load_snapshots(conn, table.meta.table_id, heads)
    assert [s.live_files() for s in snapshots] == [entries, [c]]
