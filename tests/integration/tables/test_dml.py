"""DELETE and UPDATE by predicate on real tables: what a user checks - rows, versions, files."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from catalog import Catalog, CommitOp, SchemaError, StatementError, VectorConfigError
from catalog.table import Table

pytestmark = pytest.mark.integration
ORDERS = pa.schema(
    [
        ("id", pa.int64(), False),
        ("region", pa.string()),
        ("status", pa.string()),
        ("total", pa.float64()),
    ]
)


def orders(ids: range, region: str, status: str = "open") -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "region": [region] * len(ids),
            "status": [status] * len(ids),
            "total": [float(i) for i in ids],
        },
        schema=ORDERS,
    )


def by_id(table: Table, version: int | None = None) -> dict[int, tuple]:
    rows = table.scan(version=version).to_arrow().to_pylist()
    return {r["id"]: (r["region"], r["status"], r["total"]) for r in rows}


def live_paths(table: Table) -> set[str]:
    return {f.path for f in table.plan().files}


@pytest.fixture(params=["append", "cdc"])
def table(request: pytest.FixtureRequest, catalog: Catalog) -> Table:
    if request.param == "cdc":
        return catalog.create_table(
            "shop.orders", ORDERS, primary_key=["id"], hash_buckets=2, partition_by=["region"]
        )
    return catalog.create_table("shop.orders", ORDERS, partition_by=["region"])


def write(table: Table, data: pa.Table) -> None:
    if table.meta.is_cdc:
        table.upsert(data)
    else:
        table.append(data)


def test_delete_by_predicate_one_commit(table: Table):
    write(table, orders(range(0, 10), "eu"))
    write(table, orders(range(10, 20), "us"))
    write(table, orders(range(20, 25), "eu"))
    before = by_id(table)

    result = table.delete(where=[("region", "=", "eu"), ("total", ">=", 5)])

    assert result.rows == 10
    assert result.base_version == 3 and result.version == 4
    expected = {k: v for k, v in before.items() if not (v[0] == "eu" and v[2] >= 5)}
    assert by_id(table) == expected
    assert by_id(table, version=3) == before, "time travel still reads the old rows"
    [last] = table.history(limit=1)
    assert last.op is (CommitOp.MERGE if table.meta.is_cdc else CommitOp.UPDATE)


def test_update_by_predicate(table: Table):
    write(table, orders(range(0, 6), "eu"))
    write(table, orders(range(6, 12), "us"))
    result = table.update(where=[("id", "in", [1, 2, 7])], set={"status": "void", "total": 0})
    assert result.rows == 3
    got = by_id(table)
    assert got[1] == ("eu", "void", 0.0) and got[7] == ("us", "void", 0.0)
    assert got[3] == ("eu", "open", 3.0)
    assert len(got) == 12


def test_update_of_a_partition_column_moves_rows(table: Table):
    write(table, orders(range(0, 6), "eu"))
    table.update(where=[("id", "<", 2)], set={"region": "us"})
    got = by_id(table)
    assert len(got) == 6
    assert got[0][0] == "us" and got[1][0] == "us" and got[2][0] == "eu"
    assert {r["id"] for r in table.scan(filter=[("region", "=", "us")]).to_arrow().to_pylist()} == {
        0,
        1,
    }


def test_nothing_matches_nothing_committed(table: Table):
    write(table, orders(range(0, 5), "eu"))
    result = table.delete(where=[("region", "=", "mars")])
    assert (result.rows, result.version) == (0, None)
    assert table.current_version() == 1


def test_append_statement_marks_only_files_that_may_match(catalog: Catalog):
    events = catalog.create_table("logs.events", ORDERS)
    for start in range(0, 50, 10):
        events.append(orders(range(start, start + 10), "eu"))
    untouched = live_paths(events)
    result = events.delete(where=[("id", ">=", 12), ("id", "<", 14)])
    assert (result.rows, result.files_read, result.files_replaced) == (2, 1, 1)
    assert (result.files_written, result.vectors_written, result.vector_files) == (0, 1, 0)
    assert live_paths(events) == untouched, "no file rewritten: the one holding 10..19 marked"
    [marked] = [f for f in events.plan().files if f.vector is not None]
    assert marked.vector is not None and marked.vector.cardinality == 2
    assert marked.vector.inline is not None, "two marks ride in the entry"
    assert sorted(by_id(events)) == [i for i in range(50) if i not in (12, 13)]
    assert sorted(by_id(events, version=5)) == list(range(50))


def test_copy_on_write_when_deletion_vectors_are_off(catalog: Catalog):
    events = catalog.create_table("logs.events", ORDERS, properties={"dml.deletion-vectors": "off"})
    for start in range(0, 50, 10):
        events.append(orders(range(start, start + 10), "eu"))
    untouched = live_paths(events)
    result = events.delete(where=[("id", ">=", 12), ("id", "<", 14)])
    assert (result.rows, result.files_read, result.files_replaced) == (2, 1, 1)
    assert (result.files_written, result.vectors_written) == (1, 0)
    assert len(untouched - live_paths(events)) == 1, "only the file holding ids 10..19 rewritten"
    assert all(f.vector is None for f in events.plan().files)
    assert sorted(by_id(events)) == [i for i in range(50) if i not in (12, 13)]


def test_a_bad_deletion_vectors_value_is_refused_naming_the_property(catalog: Catalog):
    events = catalog.create_table(
        "logs.events", ORDERS, properties={"dml.deletion-vectors": "maybe"}
    )
    events.append(orders(range(0, 10), "eu"))
    with pytest.raises(VectorConfigError, match=r"dml\.deletion-vectors must be on or off"):
        events.delete(where=[("id", "=", 1)])
    assert events.current_version() == 1


def test_marks_add_up_and_a_marked_row_never_matches_again(catalog: Catalog):
    events = catalog.create_table("logs.events", ORDERS)
    events.append(orders(range(0, 10), "eu"))
    [original] = live_paths(events)
    assert events.delete(where=[("id", "<", 3)]).rows == 3
    again = events.update(where=[("id", "<", 5)], set={"status": "void"})
    assert again.rows == 2, "ids 0..2 are gone: only 3 and 4 match"
    assert (again.vectors_written, again.files_written) == (1, 1)
    [kept] = [f for f in events.plan().files if f.path == original]
    assert kept.vector is not None and kept.vector.cardinality == 5  # 0..2, then 3 and 4
    got = by_id(events)
    assert sorted(got) == list(range(3, 10))
    assert got[3] == ("eu", "void", 3.0) and got[5] == ("eu", "open", 5.0)


def test_a_vector_past_the_inline_cap_goes_to_a_vector_file(catalog: Catalog, warehouse: Path):
    events = catalog.create_table(
        "logs.events", ORDERS, partition_by=["region"], properties={"vectors.inline-max-bytes": "0"}
    )
    events.append(orders(range(0, 10), "eu"))
    events.append(orders(range(10, 20), "us"))
    result = events.delete(where=[("total", ">=", 8), ("total", "<", 12)])
    assert (result.rows, result.vectors_written, result.vector_files) == (4, 2, 2)
    refs = [f.vector for f in events.plan().files if f.vector is not None]
    assert len(refs) == 2 and all(r.path is not None and r.inline is None for r in refs)
    puffins = sorted(str(p.relative_to(events.meta.location)) for p in warehouse.rglob("*.puffin"))
    assert puffins == sorted(r.path for r in refs if r.path is not None)
    assert any("region=us" in p for p in puffins), "one vector file per partition, beside its data"
    assert sorted(by_id(events)) == [i for i in range(20) if not 8 <= i < 12]


def test_deleting_every_row_of_a_file_writes_nothing(catalog: Catalog):
    events = catalog.create_table("logs.events", ORDERS)
    events.append(orders(range(0, 10), "eu"))
    result = events.delete(where=[("region", "=", "eu")])
    assert (result.rows, result.files_written) == (10, 0)
    assert events.scan().count() == 0


def test_nulls_never_match_and_survive_a_delete(catalog: Catalog):
    events = catalog.create_table("logs.events", ORDERS)
    data = orders(range(0, 4), "eu").set_column(2, "status", pa.array(["a", None, "b", None]))
    events.append(data)
    events.delete(where=[("status", "!=", "a")])
    assert sorted(by_id(events)) == [0, 1, 3]
    events.delete(where=[("status", "is_null")])
    assert sorted(by_id(events)) == [0]


def test_bad_statements_are_refused_before_anything_is_written(table: Table, warehouse: Path):
    write(table, orders(range(0, 3), "eu"))
    files = sorted(p.name for p in warehouse.rglob("*.parquet"))
    with pytest.raises(StatementError, match="at least one predicate"):
        table.delete(where=[])
    with pytest.raises(SchemaError, match="'nope' is not in"):
        table.delete(where=[("nope", "=", 1)])
    with pytest.raises(SchemaError, match="'total' has type double"):
        table.update(where=[("id", "=", 1)], set={"total": "lots"})
    with pytest.raises(TypeError, match="not both"):
        table.delete(pa.table({"id": [1]}), where=[("id", "=", 1)])
    if table.meta.is_cdc:
        with pytest.raises(StatementError, match="primary key"):
            table.update(where=[("id", "=", 1)], set={"id": 5})
    assert sorted(p.name for p in warehouse.rglob("*.parquet")) == files
    assert table.current_version() == 1
