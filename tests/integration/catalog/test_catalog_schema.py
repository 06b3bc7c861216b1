"""The catalog keeps to its own PostgreSQL schema; reading never creates or migrates a catalog;
catalogs made in ``public`` by older versions move into the schema with their data."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from catalog import Catalog, CatalogNotInitializedError
from catalog.errors import InvalidNameError
from catalog.migrations import available, migrate
from jobs.localpg import LocalPostgres

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
ROWS = pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}, schema=SCHEMA)


def empty_database(server: LocalPostgres) -> str:
    """A database with no catalog at all (the fixture's template holds one)."""
    name = f"empty_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return server.dsn(name)


def relations(dsn: str) -> list[tuple[str, str]]:
    """Every table in the database outside PostgreSQL's own schemas."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2"
        ).fetchall()
    return [(str(s), str(t)) for s, t in rows]


def schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace").fetchall()
    return {str(r[0]) for r in rows if not str(r[0]).startswith(("pg_", "information_schema"))}


def lakestream(*args: str, dsn: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args],
        env={
            **os.environ,
            "LAKESTREAM_CATALOG_DSN": dsn,
            "LAKESTREAM_LOG_LEVEL": "WARNING",
            **env,
        },
        text=True,
        capture_output=True,
        timeout=120,
        check=False,
    )


def test_a_new_catalog_lives_in_the_lakestream_schema_beside_user_tables(pg_server, warehouse):
    dsn = empty_database(pg_server)
    with psycopg.connect(dsn, autocommit=True) as conn:  # a user's table with a generic name
        conn.execute("CREATE TABLE namespace (name text PRIMARY KEY, owner text)")
        conn.execute("INSERT INTO namespace VALUES ('sales', 'ann')")

    assert lakestream("catalog", "init", "--warehouse", str(warehouse), dsn=dsn).returncode == 0
    with Catalog.connect(dsn, create=False) as cat:
        cat.create_table("shop.items", SCHEMA).append(ROWS)

    found = relations(dsn)
    assert [t for s, t in found if s == "public"] == ["namespace"]
    assert {t for s, t in found if s == "lakestream"} >= {"namespace", "table_info", "table_head"}
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT * FROM public.namespace").fetchall() == [("sales", "ann")]


@pytest.mark.parametrize(
    "command",
    [
        ("tables", "list"),
        ("tables", "describe", "shop.items"),
        ("tables", "history", "shop.items"),
        ("tables", "delete", "shop.items", "--where", "id = 1"),
        ("compactor", "status"),
    ],
)
def test_commands_against_a_database_without_a_catalog_create_nothing(pg_server, command):
    dsn = empty_database(pg_server)
    result = lakestream(*command, dsn=dsn)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "no lakestream catalog in schema 'lakestream'" in lines[0]
    assert "lakestream catalog init" in lines[0]
    assert relations(dsn) == []
    assert "lakestream" not in schemas(dsn)


def test_reading_without_a_catalog_raises_and_writes_nothing(pg_server, warehouse):
    dsn = empty_database(pg_server)
    with pytest.raises(CatalogNotInitializedError, match="lakestream catalog init") as raised:
        Catalog.connect(dsn, warehouse=warehouse, create=False)
    assert raised.value.needs_migration is False and raised.value.schema == "lakestream"
    assert relations(dsn) == []


def legacy_catalog(server: LocalPostgres, warehouse: Path) -> str:
    """A catalog as lakestream made it before migration 0006: migrations 1-5 applied by hand
    into ``public`` (what the old runner did under the default search_path), with a table and
    rows written through the catalog."""
    dsn = empty_database(server)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE schema_migration (number int PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
        )
        for migration in available()[:5]:
            with conn.transaction():
                conn.execute(migration.sql)
                conn.execute(
                    "INSERT INTO schema_migration (number, name) VALUES (%s, %s)",
                    (migration.number, migration.name),
                )
    # write through the catalog kept in public; 0006 is a no-op there and the later ones can
    # run again, so forgetting that they ran leaves the old layout (their functions stay in
    # public, unused: an old catalog met them first in its new schema)
    with Catalog.connect(dsn, warehouse=warehouse, schema="public") as cat:
        table = cat.create_table("shop.items", SCHEMA, primary_key=["id"], hash_buckets=2)
        table.upsert(ROWS)
        table.delete(pa.table({"id": [2]}))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM public.schema_migration WHERE number >= 6")
        # tables of migrations after 0006: a catalog made before 0006 never had them
        conn.execute("DROP TABLE public.change_consumer")
        conn.execute("DROP TABLE public.iceberg_metadata")
    return dsn


def test_a_catalog_in_public_needs_init_and_moves_with_its_data(pg_server, warehouse):
    dsn = legacy_catalog(pg_server, warehouse)
    before = relations(dsn)

    with pytest.raises(CatalogNotInitializedError, match="needs migration 0006") as raised:
        Catalog.connect(dsn, create=False)
    assert raised.value.needs_migration is True
    listed = lakestream("tables", "list", dsn=dsn)
    assert listed.returncode == 2
    assert "needs migration" in listed.stderr and "lakestream catalog init" in listed.stderr
    assert relations(dsn) == before  # reading migrated nothing

    init = lakestream("catalog", "init", dsn=dsn)
    assert init.returncode == 0, init.stderr

    assert [t for s, t in relations(dsn) if s == "public"] == []
    with Catalog.connect(dsn, create=False) as cat:
        assert cat.warehouse == str(warehouse)
        table = cat.load_table("shop.items")
        assert [v.version for v in table.history()] == [2, 1]
        assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
            {"id": 1, "name": "a"},
            {"id": 3, "name": "c"},
        ]
        table.upsert(pa.table({"id": [4], "name": ["d"]}, schema=SCHEMA))  # commits still work
        assert table.scan().count() == 3


def test_a_moved_catalog_has_the_schema_of_a_fresh_one(pg_server, warehouse):
    moved = legacy_catalog(pg_server, warehouse)
    fresh = empty_database(pg_server)
    for dsn in (moved, fresh):
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn)
    assert relations(moved) == relations(fresh)
    assert columns(moved) == columns(fresh)


def columns(dsn: str) -> list[tuple[str, ...]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT table_schema, table_name, column_name, data_type, is_nullable"
            " FROM information_schema.columns WHERE table_schema = 'lakestream' ORDER BY 1, 2, 3"
        ).fetchall()
    return [tuple(map(str, r)) for r in rows]


def test_catalogs_in_two_schemas_of_one_database_are_apart(pg_server, warehouse):
    dsn = empty_database(pg_server)
    with (
        Catalog.connect(dsn, warehouse=warehouse, schema="lake_a") as a,
        Catalog.connect(dsn, warehouse=warehouse, schema="lake_b") as b,
    ):
        a.create_table("shop.items", SCHEMA).append(ROWS)
        assert b.list_tables() == []
    assert {s for s, _ in relations(dsn)} == {"lake_a", "lake_b"}

    by_flag = lakestream("tables", "list", "--schema", "lake_a", dsn=dsn)
    assert by_flag.stdout.split() == ["shop.items"], by_flag.stderr
    by_env = lakestream("tables", "list", dsn=dsn, LAKESTREAM_CATALOG_SCHEMA="lake_b")
    assert by_env.returncode == 0 and by_env.stdout.strip() == ""


def test_a_schema_name_that_is_not_a_plain_identifier_is_refused(pg_server):
    dsn = empty_database(pg_server)
    for bad in ("Lake", "lake;drop", "pg_lake", "1lake", ""):
        with pytest.raises(InvalidNameError):
            Catalog.connect(dsn, schema=bad)
    result = lakestream("tables", "list", "--schema", "lake;drop", dsn=dsn)
    assert result.returncode == 2 and "--schema" in result.stderr
    assert relations(dsn) == []
