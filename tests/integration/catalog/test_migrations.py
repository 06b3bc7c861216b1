"""A catalog upgraded migration by migration, with data in it, equals a freshly created one."""

from __future__ import annotations

import subprocess

import psycopg
import pytest
from psycopg import sql

from catalog.migrations import available, migrate
from jobs.localpg import LocalPostgres

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
