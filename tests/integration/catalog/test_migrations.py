"""A catalog upgraded migration by migration, with data in it, equals a freshly created one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from catalog import Catalog, DataFile, Table
from catalog.migrations import available, migrate
from jobs.localpg import LocalPostgres
from tests.fixtures.compaction import compact_all, every_version

pytestmark = pytest.mark.integration


def empty_database(server: LocalPostgres, name: str) -> str:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return server.dsn(name)


def schema_dump(server: LocalPostgres, dsn: str) -> str:
    dump = subprocess.run(
        [str(server.bin_dir / "pg_dump"), "--schema-only", "--no-owner", dsn],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # comments and pg_dump's per-run \restrict tokens differ between any two dumps
    skip = ("--", "\\restrict", "\\unrestrict")
    return "\n".join(line for line in dump.splitlines() if not line.startswith(skip))


def test_stepwise_upgrade_with_data_equals_fresh_schema(pg_server: LocalPostgres):
    fresh = empty_database(pg_server, "fresh_catalog")
    upgraded = empty_database(pg_server, "upgraded_catalog")
    with psycopg.connect(fresh, autocommit=True) as conn:
        assert migrate(conn) == [m.number for m in available()]
    with psycopg.connect(upgraded, autocommit=True) as conn:
        for migration in available():
            assert migrate(conn, target=migration.number) == [migration.number]
            conn.execute(  # a live catalog has rows when it is upgraded
                "INSERT INTO lakestream.namespace (name) VALUES (%s)", (f"ns{migration.number}",)
            )
        assert migrate(conn) == []  # idempotent
    assert schema_dump(pg_server, upgraded) == schema_dump(pg_server, fresh)


def as_before_0012(dsn: str) -> None:
    """Put a catalog back as migration 0011 left it: the manifest column of 0008 (six fields a
    line), and no record of 0012."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SET search_path = lakestream")
        conn.execute("ALTER TABLE data_commit_info DROP COLUMN manifest")
        conn.execute(available()[7].sql)  # 0008_file_manifest
        conn.execute("DELETE FROM schema_migration WHERE number = 12")


def plans(table: Table) -> list[list[tuple[str, list[DataFile], bool]]]:
    """Every version's plan: per partition its file entries in order and whether it merges."""
    return [
        [(p.partition_desc, list(p.files), p.merge) for p in table.plan(version=v).partitions]
        for v in range(table.current_version() + 1)
    ]


def manifest_fields(dsn: str) -> set[int]:
    """How many fields the manifest lines of every commit row have."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT manifest FROM lakestream.data_commit_info").fetchall()
    return {len(line.split(b"\t")) for (blob,) in rows for line in bytes(blob).splitlines()}


def test_0012_on_a_populated_catalog_keeps_every_version_and_adds_the_vector_fields(
    pg_server: LocalPostgres, warehouse: Path
):
    dsn = empty_database(pg_server, "populated_catalog")
    schema = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.float64())])
    with Catalog.connect(dsn, warehouse=warehouse) as cat:
        events = cat.create_table("shop.events", schema, partition_by=["region"])
        for i in range(3):
            events.append(pa.table({"id": [i], "region": ["eu"], "v": [1.0]}, schema=schema))
        compact_all(cat, events)
        items = cat.create_table("shop.items", schema, primary_key=["id"], hash_buckets=2)
        items.upsert(pa.table({"id": [1, 2, 3], "region": ["eu"] * 3, "v": [1.0, 2.0, 3.0]}))
        items.upsert(pa.table({"id": [2], "region": ["us"], "v": [5.0]}, schema=schema))
        items.delete(pa.table({"id": [3]}))
        before = {t.meta.name: (plans(t), every_version(t)) for t in (events, items)}
    as_before_0012(dsn)
    assert manifest_fields(dsn) == {6}

    with psycopg.connect(dsn, autocommit=True) as conn:
        assert migrate(conn) == [12]

    assert manifest_fields(dsn) == {8}
    with Catalog.connect(dsn, warehouse=warehouse, create=False) as cat:
        for name, (planned, rows) in before.items():
            table = cat.load_table(str(name))
            assert plans(table) == planned and every_version(table) == rows
            assert all(f.vector is None and f.resolved is None for f in table.plan().files)
        items = cat.load_table("shop.items")
        items.upsert(pa.table({"id": [4], "region": ["eu"], "v": [4.0]}, schema=schema))
        assert items.scan().count() == 3  # commits go on
