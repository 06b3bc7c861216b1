"""The PostgreSQL seam: a connection pool, and the one place driver errors become catalog errors.

Connections are autocommit; every multi-statement unit of work opens ``conn.transaction()``
explicitly, so no statement ever runs in a transaction it did not ask for. The isolation level is
READ COMMITTED on purpose - see :mod:`catalog.committer` for why the conflict check is not blind
under it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from catalog.errors import CatalogUnavailableError, InvalidNameError
from catalog.migrations import DEFAULT_SCHEMA, migrate, require_current

Row = dict[str, Any]


class StoreFailure(StrEnum):
    """What kind of transient failure a :class:`TransientStoreError` is (metrics label it)."""

    CONNECTION = "connection"
    """The connection was refused or broke (the server stopped, the network failed)."""
    RESTARTING = "restarting"
    """The server is shutting down or starting up."""
    NO_CONNECTION = "no_connection"
    """The pool could not hand out a working connection within ``connect_timeout``."""
    STATEMENT_TIMEOUT = "statement_timeout"
    CONFLICT = "conflict"
    """A serialization failure or deadlock: the transaction may simply run again."""
    LOCK_BUSY = "lock_busy"

    @property
    def is_outage(self) -> bool:
        """True when the database is unreachable rather than busy: worth waiting out."""
        return self in _OUTAGE_FAILURES


_OUTAGE_FAILURES = frozenset(
    {StoreFailure.CONNECTION, StoreFailure.RESTARTING, StoreFailure.NO_CONNECTION}
)


class TransientStoreError(CatalogUnavailableError):
    """A failure after which the same unit of work may simply be tried again.

    A :class:`CatalogUnavailableError`, so it never escapes the catalog's error root; ``kind``
    tells an outage (retried by :mod:`catalog.outage`) from a busy database.
    """

    def __init__(
        self, reason: str, cause: BaseException, kind: StoreFailure = StoreFailure.CONNECTION
    ) -> None:
        super().__init__(f"{reason}: {_one_line(cause)}")
        self.reason = reason
        self.kind = kind


class LockBusy(TransientStoreError):
    """``lock_timeout`` expired while waiting for another committer."""

    def __init__(self, reason: str, cause: BaseException) -> None:
        super().__init__(reason, cause, StoreFailure.LOCK_BUSY)


#: A catalog schema name: an unquoted PostgreSQL identifier (it goes into connection options).
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def check_schema_name(schema: str) -> str:
    """``schema`` if it can name the catalog's PostgreSQL schema, else :class:`InvalidNameError`."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidNameError(
            str(schema),
            "a catalog schema is 1-63 lower-case ASCII letters, digits and '_', "
            "not starting with a digit",
        )
    if schema.startswith("pg_"):
        raise InvalidNameError(schema, "schema names starting with 'pg_' are PostgreSQL's own")
    return schema


@dataclass(frozen=True)
class StoreSettings:
    pool_size: int = 4
    connect_timeout: float = 10.0
    lock_timeout_ms: int = 5_000
    statement_timeout_ms: int = 60_000
    reconnect_timeout: float = 5.0
    """How long the pool keeps retrying one lost connection in the background before it
    gives the slot up; the next request then connects afresh. Short on purpose: the pool's
    own back-off doubles up to this bound, so a long bound would leave a process waiting
    long after the database came back (retrying an outage is :mod:`catalog.outage`'s job)."""
    schema: str = DEFAULT_SCHEMA
    """The PostgreSQL schema the catalog's tables live in: every catalog connection puts it,
    alone, on its ``search_path``, so the catalog never touches another schema."""

    def __post_init__(self) -> None:
        check_schema_name(self.schema)


class PgStore:
    """Owns the pool; hands out connections; translates driver errors at one seam."""

    def __init__(self, dsn: str, settings: StoreSettings = StoreSettings()) -> None:
        self.settings = settings
        options = (
            f"-c lock_timeout={settings.lock_timeout_ms} "
            f"-c statement_timeout={settings.statement_timeout_ms} "
            "-c default_transaction_isolation=read\\ committed "
            f"-c search_path={settings.schema}"  # checked: a plain lower-case identifier
        )
        self._pool: ConnectionPool[psycopg.Connection[DictRow]] = ConnectionPool(
            dsn,
            min_size=1,
            max_size=settings.pool_size,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "options": options,
                "connect_timeout": int(settings.connect_timeout),
                "application_name": "lakestream",
            },
            check=ConnectionPool.check_connection,
            reconnect_timeout=settings.reconnect_timeout,
            open=False,
            name="lakestream-catalog",
        )
        self._dsn = dsn

    @property
    def schema(self) -> str:
        return self.settings.schema

    def open(self, *, create: bool = True) -> None:
        """Open the pool, then create or migrate the catalog (``create``), or only check that
        it exists and is current (raising :class:`CatalogNotInitializedError`)."""
        try:
            self._pool.open(wait=True, timeout=self.settings.connect_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise CatalogUnavailableError(f"cannot connect to the catalog database: {exc}") from exc
        try:
            with self.connection() as conn, translate_errors():
                if create:
                    migrate(conn, schema=self.schema)
                else:
                    require_current(conn, self.schema)
        except BaseException:
            self._pool.close()
            raise

    def close(self) -> None:
        self._pool.close()

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[DictRow]]:
        """A pooled connection; connection-level failures surface as transient errors."""
        try:
            with self._pool.connection(timeout=self.settings.connect_timeout) as conn:
                yield conn
        except PoolTimeout as exc:
            raise TransientStoreError(
                "no catalog connection available", exc, StoreFailure.NO_CONNECTION
            ) from exc

    def fetch_all(self, sql: Any, params: dict[str, Any]) -> list[Row]:
        with self.connection() as conn, translate_errors():
            return list(conn.execute(sql, params).fetchall())

    def fetch_one(self, sql: Any, params: dict[str, Any]) -> Row | None:
        with self.connection() as conn, translate_errors():
            return conn.execute(sql, params).fetchone()


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Map the driver's transient failures to :class:`TransientStoreError`; others pass."""
    try:
        yield
    except pg_errors.LockNotAvailable as exc:
        raise LockBusy("table locked by other committers", exc) from exc
    except (pg_errors.SerializationFailure, pg_errors.DeadlockDetected) as exc:
        raise TransientStoreError(
            "transaction conflict in PostgreSQL", exc, StoreFailure.CONFLICT
        ) from exc
    except pg_errors.QueryCanceled as exc:
        raise TransientStoreError(
            "statement timed out", exc, StoreFailure.STATEMENT_TIMEOUT
        ) from exc
    except (pg_errors.AdminShutdown, pg_errors.CannotConnectNow) as exc:
        raise TransientStoreError(
            "catalog database is restarting", exc, StoreFailure.RESTARTING
        ) from exc
    except psycopg.OperationalError as exc:
        raise TransientStoreError(
            "catalog connection failed", exc, StoreFailure.CONNECTION
        ) from exc


def _one_line(error: BaseException) -> str:
    """The driver's message on one line (libpq's run over several)."""
    return " ".join(str(error).split()) or type(error).__name__
