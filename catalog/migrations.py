"""Ordered schema migrations of the catalog, which lives in a PostgreSQL schema of its own.

Migrations are the files ``sql/migrations/NNNN_name.sql``, applied in order, each in its own
transaction, recorded in ``schema_migration``. They name no schema: they run with
``search_path`` set to the catalog's schema (``lakestream`` by default), as every catalog
connection does, so one catalog can share a database with an application's own ``public`` tables,
and several catalogs can share one database.

Catalogs made before the catalog had a schema of its own sit in ``public``. Migration 6 moves them
(``ALTER TABLE ... SET SCHEMA``: indexes, constraints and row data go along) into the catalog's
schema; until it has run, the catalog is read where it is (``search_path`` = schema, ``public``).

A session-level advisory lock makes concurrent ``Catalog.connect`` calls from many processes safe:
one migrates, the others wait and then see the migrated schema. :func:`require_current` is the
read-only counterpart: it checks and never writes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import tuple_row

from catalog.errors import CatalogNotInitializedError

_LOCK_KEY = 0x6C616B6573747265  # "lakestre"
#: The schema a catalog lives in unless told otherwise.
DEFAULT_SCHEMA = "lakestream"
#: Where catalogs made before migration 6 live.
LEGACY_SCHEMA = "public"
#: The migration that moves a catalog out of ``public`` into its own schema.
MOVE_MIGRATION = 6
INIT_COMMAND = "lakestream catalog init"


@dataclass(frozen=True)
class Migration:
    number: int
    name: str
    sql: str


@dataclass(frozen=True)
class CatalogState:
    """What a database holds for the catalog of one schema, as found without writing."""

    schema: str
    applied: tuple[int, ...]
    legacy: bool
    """The catalog sits in ``public``, as made before migration 6 (which will move it)."""

    @property
    def exists(self) -> bool:
        return bool(self.applied)

    def pending(self, migrations: Sequence[Migration]) -> list[int]:
        done = set(self.applied)
        return [m.number for m in migrations if m.number not in done]


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


def inspect(conn: psycopg.Connection[Any], schema: str = DEFAULT_SCHEMA) -> CatalogState:
    """The catalog of ``schema``: its own, or a legacy one in ``public`` not yet moved."""
    own = _applied_in(conn, schema)
    if own is not None:
        return CatalogState(schema, own, legacy=False)
    if schema != LEGACY_SCHEMA:
        old = _applied_in(conn, LEGACY_SCHEMA)
        # a catalog in public that ran migration 6 was put there on purpose (schema=public)
        if old and MOVE_MIGRATION not in old:
            return CatalogState(schema, old, legacy=True)
    return CatalogState(schema, (), legacy=False)


def applied(conn: psycopg.Connection[Any], schema: str = DEFAULT_SCHEMA) -> list[int]:
    """The migrations the catalog of ``schema`` has had (none when there is no catalog)."""
    return list(inspect(conn, schema).applied)


def require_current(conn: psycopg.Connection[Any], schema: str = DEFAULT_SCHEMA) -> None:
    """Check, without writing anything, that the catalog exists and is fully migrated.

    Raises:
        CatalogNotInitializedError: no catalog in ``schema``, or one that needs migrating;
            the message names the command that fixes it.
    """
    state = inspect(conn, schema)
    if not state.exists:
        raise CatalogNotInitializedError(
            f"no lakestream catalog in schema {schema!r} of database "
            f"{_database(conn)!r}: run `{INIT_COMMAND}` to create it",
            schema=schema,
            needs_migration=False,
        )
    pending = state.pending(available())
    if pending:
        where = f"schema {LEGACY_SCHEMA!r}" if state.legacy else f"schema {schema!r}"
        raise CatalogNotInitializedError(
            f"the lakestream catalog in {where} of database {_database(conn)!r} needs "
            f"migration {_numbers(pending)}"
            + (f" (it moves into schema {schema!r})" if state.legacy else "")
            + f": run `{INIT_COMMAND}` to migrate it",
            schema=schema,
            needs_migration=True,
        )


def migrate(
    conn: psycopg.Connection[Any], target: int | None = None, *, schema: str = DEFAULT_SCHEMA
) -> list[int]:
    """Bring the catalog of ``schema`` up to date (or to ``target``); return the numbers applied.

    Creates the schema and the catalog when there is none; moves a legacy catalog from
    ``public`` into ``schema``. The connection's ``search_path`` is restored afterwards.
    """
    if not conn.autocommit:
        raise ValueError("migrate() needs an autocommit connection")
    conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
    try:
        state = inspect(conn, schema)
        todo = [
            m
            for m in available()
            if m.number in state.pending(available()) and (target is None or m.number <= target)
        ]
        if not todo:
            return []
        _create_schema(conn, schema)
        path = [schema, LEGACY_SCHEMA] if state.legacy else [schema]
        with _search_path(conn, path):
            if not state.legacy:  # a legacy catalog keeps its record (migration 6 moves it)
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migration ("
                    " number int PRIMARY KEY, name text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
                )
            for migration in todo:
                with conn.transaction():
                    conn.execute(migration.sql)  # our own package file
                    conn.execute(
                        "INSERT INTO schema_migration (number, name) VALUES (%s, %s)",
                        (migration.number, migration.name),
                    )
        return [m.number for m in todo]
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))


def _applied_in(conn: psycopg.Connection[Any], schema: str) -> tuple[int, ...] | None:
    """Numbers recorded in ``schema.schema_migration``; None when there is no such table."""
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute("SELECT to_regclass(format('%%I.schema_migration', %s::text))", (schema,))
        found = cur.fetchone()
        if found is None or found[0] is None:
            return None
        cur.execute(
            sql.SQL("SELECT number FROM {}.schema_migration ORDER BY 1").format(
                sql.Identifier(schema)
            )
        )
        return tuple(int(row[0]) for row in cur.fetchall())


def _create_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    # not CREATE SCHEMA IF NOT EXISTS: it needs the CREATE privilege even when the schema exists
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        if cur.fetchone() is None:
            cur.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))


@contextlib.contextmanager
def _search_path(conn: psycopg.Connection[Any], schemas: Sequence[str]) -> Iterator[None]:
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute("SELECT current_setting('search_path')")
        before = cur.fetchone()
        path = sql.SQL(", ").join(sql.Identifier(s) for s in schemas).as_string(conn)
        cur.execute("SELECT set_config('search_path', %s, false)", (path,))
    try:
        yield
    finally:
        if before is not None:
            conn.execute("SELECT set_config('search_path', %s, false)", (before[0],))


def _database(conn: psycopg.Connection[Any]) -> str:
    with conn.cursor(row_factory=tuple_row) as cur:
        cur.execute("SELECT current_database()")
        row = cur.fetchone()
    return str(row[0]) if row else "?"


def _numbers(numbers: Sequence[int]) -> str:
    return ", ".join(f"{n:04d}" for n in numbers)
