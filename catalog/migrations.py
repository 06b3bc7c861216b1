"""Ordered schema migrations of the catalog database.

Migrations are the files ``sql/migrations/NNNN_name.sql``, applied in order, each in its own
transaction, recorded in ``schema_migration``. A session-level advisory lock makes concurrent
``Catalog.connect`` calls from many processes safe: one migrates, the others wait and then see
the migrated schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg.rows import tuple_row

_LOCK_KEY = 0x6C616B6573747265  # "lakestre"


@dataclass(frozen=True)
class Migration:
    number: int
    name: str
    sql: str


def available() -> list[Migration]:
    folder = resources.files("catalog").joinpath("sql/migrations")
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            number, _, rest = entry.name.partition("_")
            found.append(Migration(int(number), rest.removesuffix(".sql"), entry.read_text()))
    found.sort(key=lambda m: m.number)
    if [m.number for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError("catalog migrations must be numbered 1..N without gaps")
    return found


def applied(conn: psycopg.Connection[Any]) -> list[int]:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migration ("
        " number int PRIMARY KEY, name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
    )
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute("SELECT number FROM schema_migration ORDER BY 1")
        return [int(row[0]) for row in cur.fetchall()]


def migrate(conn: psycopg.Connection[Any], target: int | None = None) -> list[int]:
    """Bring the catalog schema up to date (or to ``target``); return the numbers applied."""
    if not conn.autocommit:
        raise ValueError("migrate() needs an autocommit connection")
    conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
    try:
        done = set(applied(conn))
        newly = []
        for migration in available():
            if migration.number in done or (target is not None and migration.number > target):
                continue
            with conn.transaction():
                conn.execute(migration.sql)  # our own package file
                conn.execute(
                    "INSERT INTO schema_migration (number, name) VALUES (%s, %s)",
                    (migration.number, migration.name),
                )
            newly.append(migration.number)
        return newly
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
