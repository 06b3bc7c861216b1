"""lakestream's engine-independent table format: a PostgreSQL catalog of Parquet tables.

Never imports pyspark: Spark, the compactor and plain Python programs all use it alike.

The public surface, and the only one ``ingest`` and ``compaction`` may import (``lint-imports``
enforces it, see ``[tool.importlinter]`` in pyproject.toml):

* this module: catalog and tables, commits and their model, scans and plans, errors, retry and
  outage policies, the outage guard other packages build theirs on (``ServiceGuard`` with
  their ``OutageRules``), table metadata and the staging of files for a commit written by an
  engine (``stage_append`` / ``stage_changes``), and the building blocks a package needs to keep its
  own tables in the catalog database (``PgStore``, ``NamedQueries``, ``COMMIT_CHANNEL``), and
  the change feed split for engines that derive changes on their workers (``list_versions`` /
  ``plan_delta`` with the catalog, ``derive_changes`` / ``finish_changes`` from files alone);
* :mod:`catalog.files` - the Parquet file layer (read, write, merge-on-read, pruning, schema
  evolution). A package of its own in all but name: engines run it on their workers, it knows
  nothing of PostgreSQL, and exporting its ~30 names here would bury the catalog's own;
* :mod:`catalog.maintenance` - maintenance reports and policies;
* :mod:`catalog.logs` - the ``lakestream`` logger hierarchy every package logs through.

Every other module is internal: it may change without notice.

Errors: every error a call raises derives from :class:`CatalogError`; a failure of the database
is always :class:`CatalogUnavailableError` (no psycopg error crosses this boundary), and a commit
that does not succeed ends as one of the three :class:`CommitError` outcomes.
"""

from catalog.catalog import DEFAULT_HASH_BUCKETS, Catalog, Leftover, TableHead, WriterProgress
from catalog.changefeed import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION
from catalog.changes import (
    ChangeFeed,
    VersionDelta,
    VersionEntry,
    check_base,
    derive_changes,
    feed_schema,
    finish_changes,
    first_version_since,
    list_versions,
    plan_delta,
)
from catalog.committer import COMMIT_CHANNEL
from catalog.conflicts import CONCURRENT_MERGE_PROPERTY
from catalog.consumers import Consumer
from catalog.dml import StatementError, StatementResult
from catalog.errors import (
    CatalogError,
    CatalogNotInitializedError,
    CatalogOutageError,
    CatalogUnavailableError,
    ChangeFeedError,
    ChangesExpiredError,
    CommitConflict,
    CommitError,
    CommitRejected,
    CommitStateUnknown,
    ConflictKind,
    ConsumerNotFoundError,
    IcebergRegistrationError,
    InvalidNameError,
    InvalidPartitionError,
    MaintenanceConfigError,
    NamespaceNotEmptyError,
    SchemaError,
    TableAlreadyExistsError,
    TableNotFoundError,
    UnavailableKind,
    VersionExpiredError,
    VersionNotFoundError,
    WatermarkRegressed,
)
from catalog.files.storage import StorageError, StorageOptions
from catalog.files.vectors import VectorConfigError, VectorFormatError, VectorsNotReadableError
from catalog.index import BucketIndex, index_columns
from catalog.meta import SEQUENCE_COLUMN_PROPERTY, TableMeta, without_internal
from catalog.migrations import DEFAULT_SCHEMA
from catalog.model import (
    ROW_KIND_COLUMN,
    ROW_KIND_DELETE,
    ROW_KIND_UPSERT,
    SEQUENCE_COLUMN,
    UNSET_COLUMN,
    UNSET_TYPE,
    ColumnStats,
    CommitOp,
    CommitRequest,
    CommitResult,
    DataFile,
    FileAction,
    FileOp,
    IdempotencyKey,
    PartitionCommit,
    SourcePoint,
    SourceWatermark,
    TableCommit,
    TableCommitResult,
    VectorRef,
)
from catalog.outage import (
    OutageGuard,
    OutagePolicy,
    OutageRules,
    OutageSpent,
    OutageStats,
    ServiceGuard,
    one_line,
)
from catalog.planning import PartitionScan, ScanPlan
from catalog.queries import NamedQueries
from catalog.readpoint import NoConsistentCutError, ReadPoint
from catalog.retry import RetryPolicy, lost_to_concurrent_write
from catalog.scan import Scan, ScanFilter, partition_filter
from catalog.schemas import from_base64 as schema_from_base64
from catalog.schemas import to_base64 as schema_to_base64
from catalog.store import PgStore, StoreSettings, check_schema_name
from catalog.table import OpBytes, Table, VersionInfo
from catalog.transaction import Transaction
from catalog.writes import changes as conform_changes
from catalog.writes import stage_append, stage_changes

__all__ = [
    "BucketIndex",
    "index_columns",
    "StorageError",
    "StorageOptions",
    "VectorConfigError",
    "VectorFormatError",
    "IcebergRegistrationError",
    "VectorRef",
    "VectorsNotReadableError",
    "COMMIT_CHANNEL",
    "CONCURRENT_MERGE_PROPERTY",
    "ROW_KIND_COLUMN",
    "ROW_KIND_DELETE",
    "ROW_KIND_UPSERT",
    "SEQUENCE_COLUMN",
    "SEQUENCE_COLUMN_PROPERTY",
    "UNSET_COLUMN",
    "UNSET_TYPE",
    "Catalog",
    "DEFAULT_HASH_BUCKETS",
    "CatalogError",
    "CatalogNotInitializedError",
    "CatalogOutageError",
    "CatalogUnavailableError",
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
    "InvalidNameError",
    "InvalidPartitionError",
    "Leftover",
    "MaintenanceConfigError",
    "NamedQueries",
    "NamespaceNotEmptyError",
    "NoConsistentCutError",
    "OutageGuard",
    "OutagePolicy",
    "OutageRules",
    "OutageSpent",
    "OutageStats",
    "PartitionCommit",
    "PartitionScan",
    "PgStore",
    "ReadPoint",
    "RetryPolicy",
    "Scan",
    "ScanFilter",
    "ScanPlan",
    "SchemaError",
    "ServiceGuard",
    "SourcePoint",
    "SourceWatermark",
    "StatementError",
    "StatementResult",
    "StoreSettings",
    "Table",
    "TableAlreadyExistsError",
    "TableCommit",
    "TableCommitResult",
    "TableHead",
    "TableMeta",
    "without_internal",
    "one_line",
    "check_schema_name",
    "DEFAULT_SCHEMA",
    "TableNotFoundError",
    "Transaction",
    "UnavailableKind",
    "VersionExpiredError",
    "ChangeFeedError",
    "ChangesExpiredError",
    "ConsumerNotFoundError",
    "Consumer",
    "ChangeFeed",
    "VersionDelta",
    "VersionEntry",
    "check_base",
    "derive_changes",
    "feed_schema",
    "finish_changes",
    "first_version_since",
    "list_versions",
    "plan_delta",
    "CHANGE_TYPE",
    "COMMIT_TIMESTAMP",
    "COMMIT_VERSION",
    "VersionInfo",
    "OpBytes",
    "VersionNotFoundError",
    "WatermarkRegressed",
    "WriterProgress",
    "conform_changes",
    "lost_to_concurrent_write",
    "partition_filter",
    "schema_from_base64",
    "schema_to_base64",
    "stage_append",
    "stage_changes",
]
