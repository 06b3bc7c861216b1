"""CDC tables: a bucket's runs merged into one file; reads equal before and after at every
version, through upserts, deletes, partial rows and a schema change between runs."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalog import Catalog, CommitOp, Table
from catalog.files.bucketing import bucket_ids
from catalog.model import ROW_KIND_COLUMN, ROW_KIND_DELETE, ROW_KIND_UPSERT, UNSET_COLUMN
from catalog.writes import changes, stage_changes
from compaction.rewrite import InvalidTaskError, compact
from compaction.task import CompactionKind, CompactionTask, OutcomeStatus
from tests.fixtures.compaction import (
    compact_all,
    every_version,
    files_on_disk,
    rows_at,
)

pytestmark = pytest.mark.integration
ORDERS = pa.schema(
    [("id", pa.int64()), ("region", pa.string()), ("total", pa.float64()), ("doc", pa.string())]
)


def orders(ids, total: float, doc: str = "d") -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": pa.array([("eu", "us")[i % 2] for i in ids]),
            "total": pa.array([total + i for i in ids], pa.float64()),
            "doc": pa.array([f"{doc}{i}" for i in ids]),
        }
    )


def partial_update(table: Table, ids: list[int], total: float) -> None:
    """Changes that leave ``doc`` out (an unchanged TOASTed column), as ingest writes them."""
    rows = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": pa.array([("eu", "us")[i % 2] for i in ids]),
            "total": pa.array([total] * len(ids), pa.float64()),
            "doc": pa.nulls(len(ids), pa.string()),
            ROW_KIND_COLUMN: pa.array([ROW_KIND_UPSERT] * len(ids), pa.int8()),
            UNSET_COLUMN: pa.array([["doc"]] * len(ids), pa.list_(pa.string())),
        }
    )
    table.refresh()
    staged = stage_changes(table.meta, changes(table.meta, rows))
    table.commit(CommitOp.MERGE, staged.partitions)


def history_of_changes(catalog: Catalog) -> Table:
    table = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=2)
    table.upsert(orders(range(50), 1.0))
    table.upsert(orders(range(25, 75), 2.0, "e"))
    table.delete(pa.table({"id": pa.array(range(10), pa.int64())}))
    table.add_column("note", pa.string())  # runs before and after a schema change
    table.upsert(orders(range(5, 15), 3.0).append_column("note", pa.array(["new"] * 10)))
    partial_update(table, [30, 31, 80], 9.5)  # 80: no earlier change holds its doc
    table.delete(pa.table({"id": pa.array(range(60, 65), pa.int64())}))
    return table


def run_of(path: str) -> pa.Table:
    return pq.read_table(path)


def test_every_bucket_folds_to_one_file_and_every_version_reads_the_same(catalog: Catalog):
    table = history_of_changes(catalog)
    before = every_version(table)
    latest = rows_at(table)
    assert (30, "eu", 9.5, "e30", None) in latest  # the partial row was filled from run 2

    outcomes = compact_all(catalog, table)

    assert [o.status for o in outcomes] == [OutcomeStatus.COMMITTED] * 2
    assert all(o.task.kind is CompactionKind.MERGE_BUCKET and o.task.drop_deletes for o in outcomes)
    plan = table.plan()
    assert [len(p.files) for p in plan.partitions] == [1, 1]
    assert not any(p.merge for p in plan.partitions)  # a plain read now
    assert rows_at(table) == latest
    for version, rows in before.items():
        assert rows_at(table, version) == rows
    live = len(latest)
    assert sum(o.rows_out for o in outcomes) == live  # deleted keys are gone from the files
    for out in (f for o in outcomes for f in o.outputs):
        content = run_of(f"{table.meta.location}/{out.path}")
        assert ROW_KIND_COLUMN not in content.column_names
        assert UNSET_COLUMN not in content.column_names
        assert content.column("id").to_pylist() == sorted(content.column("id").to_pylist())
        assert out.schema_id == table.meta.current_schema_id


def test_merging_only_the_newest_runs_keeps_deletes_and_unfilled_columns(catalog: Catalog):
    table = history_of_changes(catalog)
    before = every_version(table)
    [key_30] = bucket_ids(pa.table({"id": pa.array([30], pa.int64())}), ["id"], 2).to_pylist()
    bucket = next(p for p in table.plan().partitions if p.bucket == key_30)
    task = CompactionTask(
        table=table.name,
        table_id=table.meta.table_id,
        partition_desc=bucket.partition_desc,
        kind=CompactionKind.MERGE_BUCKET,
        base_version=table.current_version(),
        inputs=bucket.files[-3:],
        drop_deletes=False,
        task_id=uuid.uuid4(),
    )

    outcome = compact(catalog, task)

    assert outcome.status is OutcomeStatus.COMMITTED
    [out] = outcome.outputs
    content = run_of(f"{table.meta.location}/{out.path}")
    assert ROW_KIND_DELETE in content.column(ROW_KIND_COLUMN).to_pylist()
    ids, unsets = content.column("id").to_pylist(), content.column(UNSET_COLUMN).to_pylist()
    unset = dict(zip(ids, unsets, strict=True))
    assert unset[30] == ["doc"]  # its doc is in an older run: left for a later merge to fill
    assert rows_at(table) == before[max(before)]
    for version, rows in before.items():
        assert rows_at(table, version) == rows
    compact_all(catalog, table)  # the rest folds in later, deletes and partial rows still apply
    assert rows_at(table) == before[max(before)]


def test_a_task_that_could_not_drop_deletes_safely_is_refused_before_writing(catalog: Catalog):
    table = history_of_changes(catalog)
    bucket = table.plan().partitions[0]
    on_disk = files_on_disk(table)
    base = CompactionTask(
        table=table.name,
        table_id=table.meta.table_id,
        partition_desc=bucket.partition_desc,
        kind=CompactionKind.MERGE_BUCKET,
        base_version=table.current_version(),
        inputs=bucket.files[-2:],
        drop_deletes=True,  # but older runs are not inputs
    )
    with pytest.raises(InvalidTaskError, match="every run"):
        compact(catalog, base)
    oldest_first = CompactionTask(**{**base.__dict__, "inputs": bucket.files[:2]})
    with pytest.raises(InvalidTaskError, match="newest runs"):
        compact(catalog, oldest_first)
    assert files_on_disk(table) == on_disk


def test_the_sequence_column_decides_the_winner_not_the_commit_order(catalog: Catalog):
    schema = pa.schema([("id", pa.int64()), ("seq", pa.int64()), ("v", pa.string())])
    table = catalog.create_table(
        "shop.seq", schema, primary_key=["id"], hash_buckets=1,
        properties={"sequence-column": "seq"},
    )  # fmt: skip
    table.upsert(pa.table({"id": [1, 2], "seq": [5, 1], "v": ["new", "old"]}))
    table.upsert(pa.table({"id": [1, 2], "seq": [3, 2], "v": ["late replay", "newer"]}))
    before = every_version(table)

    [outcome] = compact_all(catalog, table)

    assert outcome.status is OutcomeStatus.COMMITTED
    assert rows_at(table) == [(1, 5, "new"), (2, 2, "newer")] == before[2]
    assert rows_at(table, 1) == before[1]


def test_a_bucket_whose_keys_were_all_deleted_folds_to_nothing(catalog: Catalog):
    table = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=1)
    table.upsert(orders(range(5), 1.0))
    table.delete(pa.table({"id": pa.array(range(5), pa.int64())}))

    [outcome] = compact_all(catalog, table)

    assert outcome.status is OutcomeStatus.COMMITTED and outcome.outputs == ()
    assert table.plan().files == [] and rows_at(table) == []
    assert len(rows_at(table, 1)) == 5
