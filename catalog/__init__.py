"""lakestream's engine-independent table format: a PostgreSQL catalog of Parquet tables.

Never imports pyspark: Spark, the compactor and plain Python programs all use it alike.
"""

from catalog.catalog import DEFAULT_HASH_BUCKETS, Catalog, WriterProgress
from catalog.dml import StatementError, StatementResult
from catalog.errors import (
    CatalogError,
    CatalogOutageError,
    CatalogUnavailableError,
    CommitConflict,
    CommitError,
    CommitRejected,
    CommitStateUnknown,
    ConflictKind,
    SchemaError,
    TableNotFoundError,
)
from catalog.model import (
    ColumnStats,
    CommitOp,
    CommitRequest,
    CommitResult,
    DataFile,
    FileAction,
    FileOp,
    IdempotencyKey,
    PartitionCommit,
    TableCommit,
)
from catalog.outage import OutageGuard, OutagePolicy
from catalog.retry import RetryPolicy
from catalog.store import StoreSettings
from catalog.table import Table, VersionInfo
from catalog.transaction import Transaction

__all__ = [
    "DEFAULT_HASH_BUCKETS",
    "CatalogError",
    "CatalogOutageError",
    "CatalogUnavailableError",
    "Catalog",
    "ColumnStats",
    "CommitConflict",
    "CommitError",
    "CommitOp",
    "CommitRejected",
    "CommitRequest",
    "CommitResult",
    "CommitStateUnknown",
    "ConflictKind",
    "DataFile",
    "FileAction",
    "FileOp",
    "IdempotencyKey",
    "OutageGuard",
    "OutagePolicy",
    "PartitionCommit",
    "RetryPolicy",
    "SchemaError",
    "StatementError",
    "StatementResult",
    "StoreSettings",
    "Table",
    "TableCommit",
    "TableNotFoundError",
    "Transaction",
    "VersionInfo",
    "WriterProgress",
]
