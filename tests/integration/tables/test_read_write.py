"""Rows in and out of real tables: Parquet files in a warehouse, commits in a real catalog."""

from __future__ import annotations

import itertools

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog import (
    Catalog,
    CommitOp,
    FileAction,
    FileOp,
    PartitionCommit,
    SchemaError,
    TableNotFoundError,
)
from catalog.files.reader import read_merged
from catalog.files.writer import write_data_file

pytestmark = pytest.mark.integration
ORDERS = pa.schema([("id", pa.int64()), ("region", pa.string()), ("total", pa.float64())])


def rows(*records: tuple) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(ORDERS.names, r, strict=True)) for r in records], schema=ORDERS
    )


def as_set(table: pa.Table) -> set[tuple]:
    return {tuple(r.values()) for r in table.to_pylist()}


def test_append_and_read_back_with_odd_partition_values(catalog: Catalog):
    events = catalog.create_table("logs.events", ORDERS, partition_by=["region"])
    data = rows((1, "eu", 1.0), (2, None, 2.0), (3, "", 3.0), (4, "a=b,c/d", 4.0), (5, "eu", 5.0))
    result = events.append(data)
    assert result.version_of("logs.events") == 1
    assert as_set(events.scan().to_arrow()) == as_set(data)
    assert as_set(events.scan(filter=[("region", "is_null")]).to_arrow()) == {(2, None, 2.0)}
    assert events.scan(filter=[("region", "=", "")]).to_arrow().column("id").to_pylist() == [3]
    only_eu = events.scan(filter=[("region", "=", "eu")])
    assert len(only_eu.partitions()) == 1 and only_eu.count() == 2
    assert len(only_eu.plan.partitions) == 1, "other partitions pruned before their snapshots"
    assert len(events.scan(filter=[("region", "is_not_null")]).plan.partitions) == 3
    assert events.scan(columns=["id"], filter=pc.field("total") > 3.5).to_arrow().column(
        "id"
    ).to_pylist() in ([4, 5], [5, 4])
    stats = events.plan().partitions[0].files[0].stats
    assert {"id", "total"} <= set(stats)


def test_upsert_delete_and_time_travel(catalog: Catalog):
    orders = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=4)
    orders.upsert(rows((1, "eu", 10.0), (2, "us", 20.0), (3, "eu", 30.0)))
    orders.upsert(rows((2, "us", 21.0), (4, "eu", 40.0), (2, "us", 22.0)))  # last in call wins
    orders.delete(pa.table({"id": pa.array([1, 99], pa.int64())}))
    now = as_set(orders.scan().to_arrow())
    assert now == {(2, "us", 22.0), (3, "eu", 30.0), (4, "eu", 40.0)}
    assert as_set(orders.scan(version=1).to_arrow()) == {
        (1, "eu", 10.0),
        (2, "us", 20.0),
        (3, "eu", 30.0),
    }
    at = orders.history()[1].committed_at
    assert as_set(orders.scan(as_of=at).to_arrow()) == as_set(orders.scan(version=2).to_arrow())
    assert orders.scan(filter=[("id", "=", 2)]).to_arrow().column("total").to_pylist() == [22.0]
    assert len(orders.scan(filter=[("id", "=", 2)]).partitions()) == 1  # bucket pruned
    # a filter on a non-key column must not bring back an older version of a key
    assert orders.scan(filter=[("total", "=", 20.0)]).count() == 0


def test_key_moving_partition_leaves_its_old_partition(catalog: Catalog):
    orders = catalog.create_table(
        "shop.orders", ORDERS, primary_key=["id"], hash_buckets=2, partition_by=["region"]
    )
    orders.upsert(rows((1, "eu", 1.0), (2, "eu", 2.0)))
    orders.upsert(rows((1, "us", 1.5)))
    assert as_set(orders.scan().to_arrow()) == {(1, "us", 1.5), (2, "eu", 2.0)}
    orders.delete(pa.table({"id": pa.array([2], pa.int64())}))  # partition looked up
    assert as_set(orders.scan().to_arrow()) == {(1, "us", 1.5)}


SEQUENCED = ORDERS.append(pa.field("seq", pa.int64()))


def sequenced(*records: tuple) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(SEQUENCED.names, r, strict=True)) for r in records], schema=SEQUENCED
    )


def test_key_moving_partition_of_a_sequence_ordered_table(catalog: Catalog):
    """The delete an upsert leaves in a moved key's old partition is ordered by the new row's
    sequence value, so it beats the old row there; the change feed sees one update; a replayed
    older row moves nothing."""
    orders = catalog.create_table(
        "shop.orders",
        SEQUENCED,
        primary_key=["id"],
        hash_buckets=2,
        partition_by=["region"],
        properties={"sequence-column": "seq"},
    )
    orders.upsert(sequenced((1, "eu", 1.0, 10), (2, "eu", 2.0, 10)))  # v1
    orders.upsert(sequenced((1, "us", 1.5, 11)))  # v2: 1 moves partition
    assert as_set(orders.scan().to_arrow()) == {(1, "us", 1.5, 11), (2, "eu", 2.0, 10)}
    assert [(r["_change_type"], r["region"]) for r in orders.changes(2).to_pylist()] == [
        ("update_preimage", "eu"),
        ("update_postimage", "us"),
    ]
    orders.upsert(sequenced((1, "eu", 0.5, 9), (2, "eu", 2.5, 9)))  # v3: replays, both older
    assert as_set(orders.scan().to_arrow()) == {(1, "us", 1.5, 11), (2, "eu", 2.0, 10)}
    assert orders.changes(3).num_rows == 0
    orders.delete(pa.table({"id": pa.array([2], pa.int64()), "seq": pa.array([12], pa.int64())}))
    assert as_set(orders.scan().to_arrow()) == {(1, "us", 1.5, 11)}
    with pytest.raises(SchemaError, match="seq"):  # a delete must say where it orders
        orders.delete(pa.table({"id": pa.array([1], pa.int64())}))
    assert as_set(orders.scan().to_arrow()) == {(1, "us", 1.5, 11)}


@pytest.mark.parametrize(
    ("call", "data", "message"),
    [
        ("upsert", pa.table({"id": [1], "region": ["eu"], "total": ["x"]}), "total"),
        ("upsert", pa.table({"region": ["eu"], "total": [1.0]}), "required column 'id'"),
        (
            "upsert",
            pa.table({"id": pa.array([None], pa.int64()), "region": ["eu"], "total": [1.0]}),
            "may not hold nulls",
        ),
        ("upsert", pa.table({"id": [1], "region": ["eu"], "extra": [1]}), "extra"),
        (
            "upsert",
            pa.table({"id": [2**40], "region": ["eu"], "total": [1.0]}).cast(
                pa.schema([("id", pa.uint64()), ("region", pa.string()), ("total", pa.float64())])
            ),
            None,
        ),
        ("delete", pa.table({"region": ["eu"]}), "id"),
    ],
)
def test_bad_rows_are_refused_and_nothing_is_committed(catalog: Catalog, call, data, message):
    orders = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=2)
    if message is None:  # a fitting value of another integer type is accepted
        getattr(orders, call)(data)
        assert orders.current_version() == 1
        return
    with pytest.raises(SchemaError, match=message):
        getattr(orders, call)(data)
    assert orders.current_version() == 0


def test_wrong_table_kind_is_refused(catalog: Catalog):
    events = catalog.create_table("logs.events", ORDERS)
    orders = catalog.create_table("shop.orders", ORDERS, primary_key=["id"])
    with pytest.raises(SchemaError, match="no primary key"):
        events.upsert(rows((1, "eu", 1.0)))
    with pytest.raises(SchemaError, match="primary key"):
        orders.append(rows((1, "eu", 1.0)))
    catalog.drop_table("shop.orders")
    with pytest.raises(TableNotFoundError):
        orders.upsert(rows((1, "eu", 1.0)))


def test_three_schema_versions_read_under_the_newest(catalog: Catalog):
    narrow = pa.schema([("id", pa.int64()), ("qty", pa.int32())])
    orders = catalog.create_table("shop.orders", narrow, primary_key=["id"], hash_buckets=2)
    orders.upsert(pa.table({"id": [1, 2], "qty": pa.array([1, 2], pa.int32())}))
    orders.add_column("note", pa.string())
    orders.upsert(
        pa.table({"id": [2, 3], "qty": pa.array([20, 30], pa.int32()), "note": ["two", "three"]})
    )
    orders.widen_column("qty", pa.int64())
    orders.upsert(pa.table({"id": [4], "qty": [2**40], "note": ["big"]}))
    result = orders.scan().to_arrow().sort_by("id")
    assert result.schema.field("qty").type == pa.int64()
    assert result.to_pylist() == [
        {"id": 1, "qty": 1, "note": None},
        {"id": 2, "qty": 20, "note": "two"},
        {"id": 3, "qty": 30, "note": "three"},
        {"id": 4, "qty": 2**40, "note": "big"},
    ]
    assert [f.schema_id for f in orders.plan().files] and orders.meta.current_schema_id == 2
    with pytest.raises(SchemaError, match="qty"):
        orders.widen_column("qty", pa.int16())
    with pytest.raises(SchemaError, match="id"):
        orders.widen_column("id", pa.decimal128(38, 0))
    orders.drop_column("note")
    with pytest.raises(SchemaError, match="dropped earlier"):
        orders.add_column("note", pa.string())


def test_duckdb_and_polars_read_tables(catalog: Catalog):
    orders = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=2)
    orders.upsert(rows((1, "eu", 10.0), (2, "us", 20.0), (3, "eu", 30.0)))
    orders.upsert(rows((3, "eu", 33.0)))
    reader = orders.scan().to_reader()  # noqa: F841 - DuckDB finds it by name
    total = duckdb.sql(
        "SELECT region, sum(total) AS s FROM reader GROUP BY region ORDER BY 1"
    ).fetchall()
    assert total == [("eu", 43.0), ("us", 20.0)]
    frame = pl.from_arrow(orders.scan(version=1).to_arrow())
    assert frame.filter(pl.col("id") == 3)["total"].to_list() == [30.0]


keys = st.integers(0, 12)
change = st.tuples(st.sampled_from(["upsert", "delete"]), keys, st.integers(0, 99))
_names = itertools.count()


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(st.lists(change, min_size=1, max_size=8), min_size=1, max_size=6),
    buckets=st.integers(1, 3),
)
def test_merge_on_read_equals_a_dict_model_at_every_version(catalog: Catalog, batches, buckets):
    schema = pa.schema([("id", pa.int64()), ("part", pa.int32()), ("v", pa.int64())])
    table = catalog.create_table(
        f"prop.t{next(_names)}",
        schema,
        primary_key=["id", "part"],
        hash_buckets=buckets,
        partition_by=["part"],
    )
    model: dict[tuple[int, int], int] = {}
    expected = {0: {}}
    for batch in batches:
        ups = {(k, k % 2): v for op, k, v in batch if op == "upsert"}
        dels = {(k, k % 2) for op, k, _ in batch if op == "delete"} - set(ups)
        if ups:
            table.upsert(
                pa.table(
                    {
                        "id": [k for k, _ in ups],
                        "part": pa.array([p for _, p in ups], pa.int32()),
                        "v": list(ups.values()),
                    },
                    schema=schema,
                )
            )
            model.update(ups)
            expected[table.current_version()] = dict(model)
        if dels:
            table.delete(
                pa.table(
                    {"id": [k for k, _ in dels], "part": pa.array([p for _, p in dels], pa.int32())}
                )
            )
            for k in dels:
                model.pop(k, None)
            expected[table.current_version()] = dict(model)
    for version, state in expected.items():
        got = table.scan(version=version).to_arrow().to_pylist()
        assert {(r["id"], r["part"]): r["v"] for r in got} == state
        assert len(got) == len(state)


def test_a_scan_mixes_compacted_and_merge_on_read_buckets(catalog: Catalog):
    orders = catalog.create_table("shop.mixed", ORDERS, primary_key=["id"], hash_buckets=4)
    first = rows(*((i, "eu", float(i)) for i in range(40)))
    orders.upsert(first)
    orders.upsert(rows(*((i, "us", i + 0.5) for i in range(0, 40, 3))))
    base = orders.current_version()
    plan = orders.plan(version=base)
    part = plan.partitions[1]  # compact one bucket, the others stay runs
    meta = orders.meta
    merged = pa.Table.from_batches(
        list(read_merged(meta.location, part.files, meta.schema, meta.primary_key, ordered=True)),
        schema=meta.schema,
    )
    file = write_data_file(merged, meta.location, bucket=part.bucket or 0, sorted_by=["id"])
    ops = (*(FileOp(action=FileAction.DELETE, file=f) for f in part.files),)
    ops += (FileOp(action=FileAction.ADD, file=file),)
    orders.commit(
        CommitOp.COMPACTION,
        [PartitionCommit(partition_desc=part.partition_desc, ops=ops)],
        base_version=base,
    )
    scan = orders.scan()
    assert sorted(p.merge for p in scan.partitions()) == [False, True, True, True]
    expected = {(i, "us", i + 0.5) if i % 3 == 0 else (i, "eu", float(i)) for i in range(40)}
    assert as_set(scan.to_arrow()) == expected
    assert as_set(orders.scan(version=base).to_arrow()) == expected
    assert scan.count() == 40
