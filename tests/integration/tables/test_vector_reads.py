"""Every reader returns a table's rows minus the rows deletion vectors mark (design step 2):
Table.scan with columns, filters and time travel, DuckDB and Polars through the reader, CDC
buckets (masked before the merge), the change feed across a vector's version, and statements
that rewrite a marked file. Vectors are committed through the low-level API
(:func:`tests.fixtures.vectors.mark_rows`), as no writer produces them yet."""

from __future__ import annotations

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from catalog import Catalog, Table
from catalog.changefeed import CHANGE_TYPE
from tests.fixtures.vectors import mark_rows

pytestmark = pytest.mark.integration
EVENTS = pa.schema([("id", pa.int64()), ("region", pa.string()), ("total", pa.float64())])


def events(*ids: int) -> pa.Table:
    return pa.table(
        {
            "id": list(ids),
            "region": ["eu" if i % 2 else "us" for i in ids],
            "total": [float(i) for i in ids],
        },
        schema=EVENTS,
    )


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


@pytest.fixture
def event_log(catalog: Catalog) -> Table:
    """An append table of ids 1-20 over two partitions, each holding two files."""
    table = catalog.create_table("logs.events", EVENTS, partition_by=["region"])
    table.append(events(*range(1, 11)))
    table.append(events(*range(11, 21)))
    return table


@pytest.mark.parametrize("inline_max", [1024, 0], ids=["inline", "vector-file"])
def test_scan_returns_rows_minus_marks_with_columns_filters_and_time_travel(
    event_log: Table, inline_max: int
):
    before = event_log.current_version()
    mark_rows(event_log, {2, 3, 11, 20}, inline_max=inline_max)
    alive = [i for i in range(1, 21) if i not in {2, 3, 11, 20}]

    assert ids(event_log.scan().to_arrow()) == alive
    assert event_log.scan().count() == len(alive)
    assert ids(event_log.scan(columns=["id"]).to_arrow()) == alive
    assert event_log.scan(columns=[]).count() == len(alive)
    assert ids(event_log.scan(filter=[("total", ">", 9.0)]).to_arrow()) == [
        i for i in alive if i > 9
    ]
    assert ids(event_log.scan(filter=[("region", "=", "eu"), ("id", "<=", 11)]).to_arrow()) == [
        i for i in alive if i % 2 and i <= 11
    ]
    assert ids(event_log.scan(filter=pc.field("total") < 4.0).to_arrow()) == [1]
    assert ids(event_log.scan(version=before).to_arrow()) == list(range(1, 21))


def test_marks_add_up_across_versions(event_log: Table):
    first = mark_rows(event_log, {1})
    mark_rows(event_log, {5, 6}, inline_max=0)

    assert ids(event_log.scan().to_arrow()) == [i for i in range(1, 21) if i not in {1, 5, 6}]
    assert ids(event_log.scan(version=first).to_arrow()) == list(range(2, 21))


def test_duckdb_and_polars_read_rows_minus_marks(event_log: Table):
    mark_rows(event_log, {1, 2, 19})

    reader = event_log.scan().to_reader()  # noqa: F841 - DuckDB finds it by name
    found = duckdb.sql("SELECT count(*), sum(id) FROM reader").fetchall()
    frame = pl.from_arrow(event_log.scan(columns=["id", "total"]).to_reader().read_all())

    assert found == [(17, sum(range(1, 21)) - 22)]
    assert isinstance(frame, pl.DataFrame)
    assert sorted(frame["id"].to_list()) == [i for i in range(3, 21) if i != 19]


def test_a_marked_row_of_a_cdc_run_is_masked_before_the_merge(catalog: Catalog):
    """Key 2's newest change is marked: its older value is the one that counts. Key 4's only
    row is marked: it is gone. A single-run bucket (read plainly) is masked too."""
    orders = catalog.create_table("shop.orders", EVENTS, primary_key=["id"], hash_buckets=1)
    orders.upsert(events(1, 2, 3, 4))
    orders.upsert(pa.table({"id": [2, 3], "region": ["us", "eu"], "total": [22.0, 33.0]}))
    single = catalog.create_table("shop.single", EVENTS, primary_key=["id"], hash_buckets=1)
    single.upsert(events(1, 2, 3))

    newest = orders.scan(columns=["id"], filter=[("total", "=", 22.0)])
    assert ids(newest.to_arrow()) == [2]
    mark_rows(orders, {22.0}, column="total")  # the newer run's row of key 2 only
    mark_rows(orders, {4.0}, column="total")
    mark_rows(single, {2})

    rows = {r["id"]: r["total"] for r in orders.scan().to_arrow().to_pylist()}
    assert rows == {1: 1.0, 2: 2.0, 3: 33.0}
    assert orders.scan(filter=[("id", "=", 2)]).to_arrow().column("total").to_pylist() == [2.0]
    assert ids(single.scan().to_arrow()) == [1, 3]


def test_change_feed_shows_a_vector_version_as_deletes_of_the_marked_rows(event_log: Table):
    marked = mark_rows(event_log, {4, 13})
    event_log.append(events(21))

    changes = event_log.changes(start_version=marked)

    got = sorted(
        zip(changes.column("id").to_pylist(), changes.column(CHANGE_TYPE).to_pylist(), strict=True)
    )
    assert got == [(4, "delete"), (13, "delete"), (21, "insert")]
    assert changes.column("_commit_version").to_pylist().count(marked) == 2
    assert event_log.changes(start_version=marked, net=True).num_rows == 3


def test_change_feed_of_a_cdc_table_sees_marked_keys_deleted(catalog: Catalog):
    orders = catalog.create_table("shop.orders", EVENTS, primary_key=["id"], hash_buckets=2)
    orders.upsert(events(1, 2, 3, 4))
    orders.upsert(pa.table({"id": [2], "region": ["us"], "total": [22.0]}))
    marked = mark_rows(orders, {4.0, 22.0}, column="total")  # key 4 gone, key 2 back to 2.0

    changes = orders.changes(start_version=marked, end_version=marked)

    got = sorted(
        zip(
            changes.column("id").to_pylist(),
            changes.column(CHANGE_TYPE).to_pylist(),
            changes.column("total").to_pylist(),
            strict=True,
        )
    )
    assert got == [
        (2, "update_postimage", 2.0),
        (2, "update_preimage", 22.0),
        (4, "delete", 4.0),
    ]


def test_a_compaction_that_names_files_again_without_new_marks_changes_nothing(
    event_log: Table,
):
    mark_rows(event_log, {7})
    again = mark_rows(event_log, {7})  # the same vector, named again

    assert event_log.changes(start_version=again).num_rows == 0


def test_a_statement_rewriting_a_marked_file_keeps_the_marked_rows_deleted(event_log: Table):
    mark_rows(event_log, {1, 3})

    event_log.delete(where=[("id", "=", 5)])
    event_log.update(where=[("id", "=", 7)], set={"total": 70.0})

    rows = {r["id"]: r["total"] for r in event_log.scan().to_arrow().to_pylist()}
    assert sorted(rows) == [i for i in range(2, 21) if i not in {3, 5}]
    assert rows[7] == 70.0
