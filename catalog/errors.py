"""The catalog's error hierarchy.

One root (:class:`CatalogError`) and, for commits, exactly three outcomes a caller must tell apart
without reading message text:

* :class:`CommitConflict` - the commit did not land; recompute or replan and try again.
* :class:`CommitRejected` - the commit can never land as it is (dropped table, bad input).
* :class:`CommitStateUnknown` - the connection died during COMMIT; the files must be kept and the
  outcome resolved by the idempotency key (:meth:`catalog.Catalog.resolve_commit`).
"""

from __future__ import annotations

import datetime as dt
import uuid
from enum import StrEnum


class CatalogError(Exception):
    """Root of every error raised by ``catalog``."""


class InvalidNameError(CatalogError, ValueError):
    """A namespace, table or column name that is not allowed."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"invalid name {name!r}: {reason}")
        self.name = name
        self.reason = reason


class InvalidPartitionError(CatalogError, ValueError):
    """A partition description or partition value that does not fit the table's spec."""


class SchemaError(CatalogError, ValueError):
    """Data or a schema change that does not fit the table's schema."""

    def __init__(self, message: str, *, table: str | None = None, column: str | None = None):
        super().__init__(message)
        self.table = table
        self.column = column


class TableNotFoundError(CatalogError, LookupError):
    def __init__(self, table: str) -> None:
        super().__init__(f"table {table!r} does not exist")
        self.table = table


class TableAlreadyExistsError(CatalogError):
    def __init__(self, table: str) -> None:
        super().__init__(f"table {table!r} already exists")
        self.table = table


class NamespaceNotEmptyError(CatalogError):
    def __init__(self, namespace: str) -> None:
        super().__init__(f"namespace {namespace!r} still holds tables")
        self.namespace = namespace


class VersionNotFoundError(CatalogError, LookupError):
    """A time-travel read asked for a version or time the table does not have (or has expired)."""


class UnavailableKind(StrEnum):
    """Why a :class:`CatalogUnavailableError` was raised (metrics and outage guards label it)."""

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
    """``lock_timeout`` expired while waiting for another committer."""

    @property
    def is_outage(self) -> bool:
        """True when the database is unreachable rather than busy: worth waiting out."""
        return self in _OUTAGE_KINDS


_OUTAGE_KINDS = frozenset(
    {UnavailableKind.CONNECTION, UnavailableKind.RESTARTING, UnavailableKind.NO_CONNECTION}
)


class CatalogUnavailableError(CatalogError):
    """PostgreSQL could not be reached or answered with a transient failure; the call that
    raised it committed nothing (an unknown commit outcome is :class:`CommitStateUnknown`).

    The one type the catalog raises for every driver failure worth trying again: no psycopg
    error crosses the catalog's boundary (the driver's error is the ``__cause__``). ``kind``
    says which failure it was; None for a call that gave up on its own retries.

    Interactive calls (reads, the CLI) raise it at once. Long-running processes retry it
    through :class:`catalog.outage.OutageGuard` until their outage budget is spent.
    """

    def __init__(self, message: str, *, kind: UnavailableKind | None = None) -> None:
        super().__init__(message)
        self.kind = kind


class CatalogNotInitializedError(CatalogError):
    """The database holds no catalog in the schema asked for, or one that needs migrating.

    Raised by ``Catalog.connect(..., create=False)`` (what read-only commands use), which never
    creates or migrates anything; ``lakestream catalog init`` (or ``Catalog.connect`` with
    ``create=True``) does.
    """

    def __init__(self, message: str, *, schema: str, needs_migration: bool) -> None:
        super().__init__(message)
        self.schema = schema
        self.needs_migration = needs_migration
        """True when a catalog exists but in an older layout (pending migrations)."""


class CatalogOutageError(CatalogUnavailableError):
    """The catalog stayed unreachable for longer than the outage budget: the process stops.

    Never retried by an outage guard (it is the guard's verdict).
    """

    def __init__(
        self,
        *,
        catalog: str,
        operation: str,
        outage_s: float,
        budget_s: float,
        attempts: int,
        error: str,
    ) -> None:
        super().__init__(
            f"catalog {catalog} unavailable for {outage_s:.1f} s, giving up: the outage budget "
            f"is {budget_s:g} s (during {operation}; failed attempts: {attempts}; last error: "
            f"{error})"
        )
        self.catalog = catalog
        """The catalog's DSN with the password masked."""
        self.operation = operation
        self.outage_s = outage_s
        self.budget_s = budget_s
        self.attempts = attempts
        self.error = error


class ConflictKind(StrEnum):
    """Why a commit lost; each kind says what the caller should do next."""

    CONCURRENT_WRITE = "concurrent_write"
    """The matrix forbids my op after theirs: re-read the table and recompute."""
    INPUT_FILES_GONE = "input_files_gone"
    """Files my commit deletes are no longer in the snapshot: replan the compaction / update."""
    BUSY = "busy"
    """The table stayed locked by other committers past the retry budget: retry later."""

    @property
    def help(self) -> str:
        return {
            ConflictKind.CONCURRENT_WRITE: "re-read the table at its new version and recompute",
            ConflictKind.INPUT_FILES_GONE: "replan against the latest snapshot",
            ConflictKind.BUSY: "the table is busy; retry the same commit later",
        }[self]


class CommitError(CatalogError):
    """Root of the three commit outcomes that are not a success."""


class CommitConflict(CommitError):
    """The commit did not land because a concurrent commit won. Safe to recompute and retry."""

    def __init__(
        self,
        *,
        kind: ConflictKind,
        table: str,
        partition_desc: str | None = None,
        expected_version: int | None = None,
        actual_version: int | None = None,
        winning_commit: uuid.UUID | None = None,
        winning_op: str | None = None,
    ) -> None:
        where = f"{table}" + (f" partition {partition_desc!r}" if partition_desc else "")
        super().__init__(
            f"commit conflict on {where}: planned against version {expected_version}, "
            f"found {actual_version} (winning commit {winning_commit}, op {winning_op}); "
            f"{kind.help}"
        )
        self.kind = kind
        self.table = table
        self.partition_desc = partition_desc
        self.expected_version = expected_version
        self.actual_version = actual_version
        self.winning_commit = winning_commit
        self.winning_op = winning_op


class CommitRejected(CommitError):
    """The commit can never land as it is: do not retry it unchanged."""

    def __init__(self, message: str, *, table: str | None = None) -> None:
        super().__init__(message)
        self.table = table


class WatermarkRegressed(CommitRejected):
    """A streaming writer's commit whose source watermark lies before the one it committed last:
    nothing landed. Publishing a source transaction before one that committed earlier is the
    only way to get here (a bug, or ENDs delivered out of order), so it is never retried."""

    def __init__(self, message: str, *, writer_id: str) -> None:
        super().__init__(message)
        self.writer_id = writer_id


class CommitStateUnknown(CommitError):
    """The connection died during COMMIT. Never delete the files; resolve by the key."""

    def __init__(self, message: str, *, writer_id: str, batch_id: int) -> None:
        super().__init__(message)
        self.writer_id = writer_id
        self.batch_id = batch_id


class VersionExpiredError(VersionNotFoundError):
    """A time-travel read before the table's expiry horizon: those versions were expired."""

    def __init__(
        self,
        message: str,
        *,
        table: str,
        oldest_version: int,
        oldest_committed_at: dt.datetime,
    ) -> None:
        super().__init__(message)
        self.table = table
        self.oldest_version = oldest_version
        self.oldest_committed_at = oldest_committed_at


class MaintenanceConfigError(CatalogError, ValueError):
    """A maintenance setting (table property or argument) with a value that cannot work."""

    def __init__(self, message: str, *, table: str | None = None, setting: str | None = None):
        super().__init__(message)
        self.table = table
        self.setting = setting


class ChangeFeedError(CatalogError, ValueError):
    """A change-feed read that cannot be answered as asked (a bad range or table property)."""

    def __init__(self, message: str, *, table: str) -> None:
        super().__init__(message)
        self.table = table


class ChangesExpiredError(VersionExpiredError):
    """Changes asked from a version whose base state was expired: they can no longer be
    computed, and skipping them silently would lose changes. Names both versions."""

    def __init__(
        self,
        message: str,
        *,
        table: str,
        start_version: int,
        oldest_version: int,
        oldest_committed_at: dt.datetime,
        consumer_id: str | None = None,
    ) -> None:
        super().__init__(
            message,
            table=table,
            oldest_version=oldest_version,
            oldest_committed_at=oldest_committed_at,
        )
        self.start_version = start_version
        self.consumer_id = consumer_id


class ConsumerNotFoundError(CatalogError, LookupError):
    """No consumer of that id is registered on the table."""

    def __init__(self, table: str, consumer_id: str) -> None:
        super().__init__(f"{table} has no registered consumer {consumer_id!r}")
        self.table = table
        self.consumer_id = consumer_id


class IcebergRegistrationError(CatalogError):
    """The Iceberg SQL catalog holds another table under this table's name (see
    :mod:`catalog.iceberg`; defined here so that ``import catalog`` needs no pyiceberg)."""

    def __init__(self, message: str, *, table: str) -> None:
        super().__init__(message)
        self.table = table
