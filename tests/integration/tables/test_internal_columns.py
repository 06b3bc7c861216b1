"""lakestream's own columns (``_ls_seq``) order changes but stay out of what users read, unless
they ask for them; ``tables history`` says when it counts changes rather than rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import duckdb
import polars as pl
import pyarrow as pa
import pytest

from catalog import Catalog, SchemaError, Table
from catalog.model import SEQUENCE_COLUMN
from ingest.sink.tables import create_cdc_table

pytestmark = pytest.mark.integration

COLUMNS = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string())])


def seq(n: int) -> bytes:
    return n.to_bytes(16, "big")


def changes(ids: list[int], names: list[str], seqs: list[int]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": names,
            SEQUENCE_COLUMN: pa.array([seq(s) for s in seqs], pa.binary(16)),
        }
    )


@pytest.fixture
def table(catalog: Catalog) -> Table:
    """A CDC table as ingest makes it, where a later source position must win."""
    table = create_cdc_table(catalog, "shop.customers", COLUMNS, primary_key=["id"])
    table.upsert(changes([1, 2], ["ann", "bob"], [20, 30]))
    table.upsert(changes([1], ["stale"], [10]))  # replayed older change: must not win
    return table


def test_scans_and_schema_show_only_user_columns(table: Table):
    read = table.scan().to_arrow()
    assert read.column_names == ["id", "name"]
    assert sorted(read.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "ann"},
        {"id": 2, "name": "bob"},
    ]
    assert table.schema.names == ["id", "name"]
    assert SEQUENCE_COLUMN in table.meta.schema.names  # writers and compaction still see it
    reader = table.scan().to_reader()
    assert reader.schema.names == ["id", "name"]
    assert pl.from_arrow(table.scan().to_arrow()).columns == ["id", "name"]
    assert duckdb.sql("SELECT * FROM reader").columns == ["id", "name"]


def test_internal_columns_are_there_when_asked_for(table: Table):
    full = table.scan(include_internal=True).to_arrow()
    assert full.column_names == ["id", "name", SEQUENCE_COLUMN]
    assert {r["id"]: r[SEQUENCE_COLUMN] for r in full.to_pylist()} == {1: seq(20), 2: seq(30)}
    named = table.scan(columns=["id", SEQUENCE_COLUMN]).to_arrow()
    assert named.column_names == ["id", SEQUENCE_COLUMN]
    since = table.scan(filter=[(SEQUENCE_COLUMN, ">", seq(25))]).to_arrow()
    assert since.to_pylist() == [{"id": 2, "name": "bob"}]


def test_schema_changes_keep_the_internal_column(table: Table):
    table.add_column("email", pa.string())
    assert table.schema.names == ["id", "name", "email"]
    assert table.meta.schema.names == ["id", "name", SEQUENCE_COLUMN, "email"]
    with pytest.raises(SchemaError, match=SEQUENCE_COLUMN):
        table.drop_column(SEQUENCE_COLUMN)
    described = table.describe()
    assert [c["name"] for c in described["schema"]] == ["id", "name", "email"]
    assert described["internal_columns"] == [SEQUENCE_COLUMN]


def history(table: str, dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", "tables", "history", table, *args],
        env={**os.environ, "LAKESTREAM_CATALOG_DSN": dsn, "LAKESTREAM_LOG_LEVEL": "WARNING"},
        text=True,
        capture_output=True,
        timeout=120,
        check=True,
    )


def test_history_says_when_it_counts_changes(catalog: Catalog, catalog_dsn: str, table: Table):
    catalog.create_table("shop.visits", COLUMNS).append(
        pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
    )
    cdc = history("shop.customers", catalog_dsn)
    assert "changes+" in cdc.stdout.splitlines()[0] and "rows+" not in cdc.stdout
    append = history("shop.visits", catalog_dsn)
    assert "rows+" in append.stdout.splitlines()[0]

    rows = json.loads(history("shop.customers", catalog_dsn, "--json").stdout)
    assert [r["rows_added"] for r in rows] == [1, 2]  # the key stays; it counts changes
    assert {r["rows_added_unit"] for r in rows} == {"changes"}
    appended = json.loads(history("shop.visits", catalog_dsn, "--json").stdout)
    assert appended[0]["rows_added"] == 3 and appended[0]["rows_added_unit"] == "rows"
