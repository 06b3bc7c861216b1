"""The PostgreSQL seam: a connection pool, and the one place driver errors become catalog errors.

Connections are autocommit; every multi-statement unit of work opens ``conn.transaction()``
(or, where round trips count, :func:`pipelined_transaction`) explicitly, so no statement ever
runs in a transaction it did not ask for. The isolation level is
READ COMMITTED on purpose - see :mod:`catalog.committer` for why the conflict check is not blind
under it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from catalog.errors import CatalogUnavailableError, InvalidNameError, UnavailableKind
from catalog.migrations import DEFAULT_SCHEMA, migrate, require_current
from catalog.outage import connection_wait

Row = dict[str, Any]


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
    client_check_interval_ms: int = 200
    """How often a backend running a statement checks that its client is still connected
    (``client_connection_check_interval``, PostgreSQL 14+). A commit is published by one
    statement that commits by itself once it has the locks; without the check, a writer killed
    while that statement waits for a lock would still publish seconds later - after a restarted
    writer may have read the catalog's offsets and started over from them. With it, the
    orphaned statement is cancelled within this interval of the client's death."""
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
            f"-c client_connection_check_interval={settings.client_check_interval_ms} "
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
        """A pooled connection. Every transient driver failure in the block (and in handing out
        the connection) leaves as :class:`CatalogUnavailableError`, so no caller can let a
        psycopg error escape the catalog by forgetting :func:`translate_errors`. Waits for a
        free connection up to ``connect_timeout``, or what a guarded call's outage budget has
        left (:func:`catalog.outage.connection_wait`)."""
        try:
            with (
                translate_errors(),
                self._pool.connection(
                    timeout=connection_wait(self.settings.connect_timeout)
                ) as conn,
            ):
                yield conn
        except PoolTimeout as exc:
            raise _unavailable(
                "no catalog connection available", exc, UnavailableKind.NO_CONNECTION
            ) from exc

    def fetch_all(self, sql: Any, params: dict[str, Any]) -> list[Row]:
        with self.connection() as conn, translate_errors():
            return list(conn.execute(sql, params).fetchall())

    def fetch_one(self, sql: Any, params: dict[str, Any]) -> Row | None:
        with self.connection() as conn, translate_errors():
            return conn.execute(sql, params).fetchone()


@contextlib.contextmanager
def pipelined_transaction(conn: psycopg.Connection[DictRow]) -> Iterator[None]:
    """``BEGIN`` ... ``COMMIT`` with the connection in pipeline mode.

    Statements are queued and travel together, so the transaction costs one round trip per
    result the block waits for, plus one for COMMIT with whatever is still queued, instead of
    one per statement. That matters most to the commit protocol, whose table locks are held
    from the round trip that takes them to the one that commits. On an error the server skips
    the rest of the queue; the transaction is rolled back (if the connection still works)
    before the error leaves.
    """
    try:
        with conn.pipeline() as pipeline:
            try:
                conn.execute("BEGIN", prepare=False)
                yield
                # sent with whatever is still queued as the pipeline ends
                conn.execute("COMMIT", prepare=False)
            except BaseException:
                if not conn.broken:
                    with contextlib.suppress(psycopg.Error):
                        pipeline.sync()  # collect what the server skipped after an error
                raise
    except BaseException:
        if not conn.broken and conn.info.transaction_status is not TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK", prepare=False)
        raise


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Map the driver's transient failures to :class:`CatalogUnavailableError` with their
    :class:`UnavailableKind`; other errors pass (they are bugs, or handled by the caller, such
    as a unique violation that means "already exists")."""
    try:
        yield
    except pg_errors.LockNotAvailable as exc:
        raise _unavailable(
            "table locked by other committers", exc, UnavailableKind.LOCK_BUSY
        ) from exc
    except (pg_errors.SerializationFailure, pg_errors.DeadlockDetected) as exc:
        raise _unavailable(
            "transaction conflict in PostgreSQL", exc, UnavailableKind.CONFLICT
        ) from exc
    except pg_errors.QueryCanceled as exc:
        raise _unavailable("statement timed out", exc, UnavailableKind.STATEMENT_TIMEOUT) from exc
    except (pg_errors.AdminShutdown, pg_errors.CannotConnectNow) as exc:
        raise _unavailable(
            "catalog database is restarting", exc, UnavailableKind.RESTARTING
        ) from exc
    except psycopg.OperationalError as exc:
        raise _unavailable("catalog connection failed", exc, UnavailableKind.CONNECTION) from exc


def _unavailable(
    reason: str, cause: BaseException, kind: UnavailableKind
) -> CatalogUnavailableError:
    return CatalogUnavailableError(f"{reason}: {_one_line(cause)}", kind=kind)


def _one_line(error: BaseException) -> str:
    """The driver's message on one line (libpq's run over several)."""
    return " ".join(str(error).split()) or type(error).__name__
