"""The public face of the catalog: :class:`Catalog`, :class:`Table` and :class:`Transaction`.

Engine-independent by design: a Spark job, the compactor, a Flink or Trino connector or a plain
Python program all read and commit through these objects (and never need pyspark).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, overload

import pyarrow as pa
import pyarrow.compute as pc
import structlog
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb

from catalog import schemas
from catalog.committer import Committer
from catalog.dml import StatementResult, WhereSpec, run_statement
from catalog.errors import (
    CatalogError,
    CommitConflict,
    ConflictKind,
    InvalidNameError,
    MaintenanceConfigError,
    NamespaceNotEmptyError,
    SchemaError,
    TableAlreadyExistsError,
    TableNotFoundError,
    VersionNotFoundError,
)
from catalog.files.writer import WriteOptions
from catalog.maintenance.expiry import ExpiryReport, check_horizon, expire_versions
from catalog.maintenance.policy import MaintenancePolicy, check_retain_last, ttl_column
from catalog.maintenance.ttl import TtlReport, drop_expired_partitions
from catalog.maintenance.vacuum import Vacuum, VacuumReport
from catalog.meta import SEQUENCE_COLUMN_PROPERTY, TableMeta
from catalog.model import (
    UNAWARE_BUCKET,
    CommitOp,
    CommitRequest,
    CommitResult,
    IdempotencyKey,
    PartitionCommit,
    TableCommit,
)
from catalog.names import TableName, check_identifier, parse_table_name
from catalog.partitioning import PartitionSpec
from catalog.planning import PartitionFilter, ScanPlan, plan_scan
from catalog.queries import query
from catalog.retry import RetryPolicy
from catalog.scan import FilterSpec, Scan, ScanFilter, partition_filter
from catalog.schema_changes import plan_schema_change, record_schema
from catalog.snapshots import all_partition_heads, load_snapshots, partition_heads
from catalog.store import PgStore, StoreSettings, translate_errors
from catalog.writes import (
    DEFAULT_WRITE_OPTIONS,
    conform,
    deletes,
    key_and_partition_columns,
    stage_append,
    stage_changes,
    upserts,
)

log = structlog.get_logger("lakestream.catalog")

DEFAULT_HASH_BUCKETS = 4
WAREHOUSE_PROPERTY = "warehouse"


@dataclass(frozen=True)
class VersionInfo:
    """One entry of a table's history."""

    version: int
    op: CommitOp
    committed_at: dt.datetime
    commit_id: uuid.UUID
    writer_id: str
    batch_id: int
    summary: Mapping[str, Any]

    @property
    def files_added(self) -> int:
        return int(self.summary.get("files_added", 0))

    @property
    def rows_added(self) -> int:
        return int(self.summary.get("rows_added", 0))


@dataclass(frozen=True)
class WriterProgress:
    writer_id: str
    batch_id: int
    commit_id: uuid.UUID
    source_offsets: Any
    updated_at: dt.datetime
    table_ids: list[uuid.UUID]


@dataclass(frozen=True)
class TableHead:
    """A live table's identity and latest version."""

    name: str
    table_id: uuid.UUID
    version: int


@dataclass(frozen=True)
class Leftover:
    """Files no reader will ever see: of commits never published, or discarded ones."""

    table_id: uuid.UUID
    paths: tuple[str, ...]
    reason: str
    commit_id: uuid.UUID | None
    since: dt.datetime


class Catalog:
    """A connection to a lakestream catalog in PostgreSQL. Thread-safe; one per process."""

    def __init__(self, store: PgStore, retry: RetryPolicy, warehouse: str | None) -> None:
        self._store = store
        self._committer = Committer(store, retry)
        self._warehouse = warehouse

    @classmethod
    def connect(
        cls,
        dsn: str,
        *,
        warehouse: str | Path | None = None,
        settings: StoreSettings | None = None,
        retry: RetryPolicy | None = None,
        migrate: bool = True,
    ) -> Catalog:
        """Connect, creating or migrating the catalog schema; remember the warehouse root."""
        store = PgStore(dsn, settings or StoreSettings())
        store.open(migrate_schema=migrate)
        catalog = cls(store, retry or RetryPolicy(), None)
        catalog._warehouse = catalog._init_warehouse(warehouse)
        return catalog

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def warehouse(self) -> str | None:
        return self._warehouse

    # -- namespaces and tables ---------------------------------------------------------------

    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        *,
        primary_key: Sequence[str] = (),
        hash_buckets: int | None = None,
        partition_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        location: str | None = None,
    ) -> Table:
        """Create a CDC table (``primary_key`` given) or an append table (bucket -1)."""
        table_name = parse_table_name(name)
        props = _check_properties(properties or {})
        spec = _spec_for(table_name, primary_key, hash_buckets, partition_by)
        prepared = schemas.prepare_table_schema(
            schema,
            table=str(table_name),
            primary_key=primary_key,
            partition_by=partition_by,
            sequence_column=props.get(SEQUENCE_COLUMN_PROPERTY),
        )
        table_id = uuid.uuid4()
        where = location or self._default_location(table_name, table_id)
        params = {
            "table_id": table_id,
            "namespace": table_name.namespace,
            "name": table_name.name,
            "location": where,
            "partition_columns": list(spec.columns),
            "hash_buckets": spec.hash_buckets,
            "primary_key": list(primary_key),
            "properties": Jsonb(props),
        }
        try:
            with self._store.connection() as conn, translate_errors(), conn.transaction():
                conn.execute(query("insert_namespace"), {"name": table_name.namespace})
                conn.execute(query("insert_table"), params)
                conn.execute(query("insert_table_head"), params)
                conn.execute(
                    query("insert_schema"),
                    {
                        "table_id": table_id,
                        "schema_id": 0,
                        "arrow_schema": schemas.serialize(prepared),
                    },
                )
        except pg_errors.UniqueViolation as exc:
            raise TableAlreadyExistsError(str(table_name)) from exc
        log.info("table_created", table=str(table_name), kind=spec, location=where)
        return self.load_table(str(table_name))

    def load_table(self, name: str) -> Table:
        table_name = parse_table_name(name)
        row = self._store.fetch_one(
            query("table_by_name"), {"namespace": table_name.namespace, "name": table_name.name}
        )
        if row is None:
            raise TableNotFoundError(str(table_name))
        return Table(self, self._meta_from_row(row))

    def table_exists(self, name: str) -> bool:
        try:
            self.load_table(name)
        except TableNotFoundError:
            return False
        return True

    def list_tables(self, namespace: str | None = None) -> list[str]:
        ns = check_identifier(namespace, "namespace") if namespace is not None else None
        rows = self._store.fetch_all(query("list_tables"), {"namespace": ns})
        return [f"{r['namespace']}.{r['name']}" for r in rows]

    def list_namespaces(self) -> list[str]:
        rows = self._store.fetch_all("SELECT name FROM namespace ORDER BY name", {})
        return [r["name"] for r in rows]

    def drop_namespace(self, namespace: str) -> None:
        ns = check_identifier(namespace, "namespace")
        if self.list_tables(ns):
            raise NamespaceNotEmptyError(ns)
        self._store.fetch_all(
            "DELETE FROM namespace n WHERE name = %(name)s AND NOT EXISTS "
            "(SELECT 1 FROM table_info t WHERE t.namespace = n.name) RETURNING name",
            {"name": ns},
        )

    def drop_table(self, name: str) -> None:
        """Drop a table: it disappears at once; its files stay until maintenance purges them."""
        table_name = parse_table_name(name)
        with self._store.connection() as conn, translate_errors(), conn.transaction():
            row = conn.execute(
                "SELECT table_id FROM table_info WHERE namespace = %(namespace)s "
                "AND name = %(name)s AND dropped_at IS NULL",
                {"namespace": table_name.namespace, "name": table_name.name},
            ).fetchone()
            if row is None:
                raise TableNotFoundError(str(table_name))
            # wait for in-flight commits so none lands after the drop
            conn.execute(query("lock_tables"), {"table_ids": [row["table_id"]]})
            conn.execute(
                query("drop_table"), {"namespace": table_name.namespace, "name": table_name.name}
            )
        log.info("table_dropped", table=str(table_name))

    # -- commits -----------------------------------------------------------------------------

    def commit(
        self, request: CommitRequest, *, known: Mapping[str, TableMeta] | None = None
    ) -> CommitResult:
        """Commit file operations to one or several tables atomically (the low-level API).

        ``known`` passes metadata the caller already holds; the commit still checks under the
        table lock that each table is live, so stale metadata cannot commit to a dropped table.
        """
        known = known or {}
        metas = {
            tc.table: known[tc.table] if tc.table in known else self.load_table(tc.table).meta
            for tc in request.tables
        }
        result = self._committer.commit(request, metas)
        log.info(
            "commit",
            commit_id=str(result.commit_id),
            writer_id=request.key.writer_id,
            batch_id=request.key.batch_id,
            replayed=result.replayed,
            attempts=result.attempts,
            tables={t.table: t.version for t in result.tables},
            files=sum(len(p.ops) for tc in request.tables for p in tc.partitions),
        )
        return result

    def transaction(
        self, key: IdempotencyKey | None = None, source_offsets: dict[str, object] | None = None
    ) -> Transaction:
        return Transaction(self, key, source_offsets)

    def resolve_commit(self, writer_id: str, batch_id: int) -> CommitResult | None:
        """The commit made under (writer_id, batch_id), or None if it never landed."""
        return self._committer.resolve(IdempotencyKey(writer_id=writer_id, batch_id=batch_id))

    def writer_progress(self, writer_id: str) -> WriterProgress | None:
        row = self._store.fetch_one(query("writer_progress"), {"writer_id": writer_id})
        return WriterProgress(**row) if row else None

    def leftovers(self, older_than: dt.timedelta = dt.timedelta(hours=1)) -> list[Leftover]:
        """What crashed or losing writers left behind, older than a grace period.

        Commit rows that were prepared but never published name files that no snapshot holds;
        discarded compactions recorded theirs for cleanup. Maintenance deletes both.
        """
        with self._store.connection() as conn, translate_errors():
            before = conn.execute(
                "SELECT clock_timestamp() - %(g)s AS t", {"g": older_than}
            ).fetchone()
            assert before is not None
            pending = conn.execute(
                query("pending_data_commits"), {"before": before["t"]}
            ).fetchall()
            discarded = conn.execute(query("cleanup_files"), {"before": before["t"]}).fetchall()
        found = [
            Leftover(
                r["table_id"],
                tuple(op["file"]["path"] for op in r["file_ops"] if op["action"] == "add"),
                "commit never published",
                r["commit_id"],
                r["created_at"],
            )
            for r in pending
        ]
        found += [
            Leftover(r["table_id"], (r["path"],), r["reason"], r["commit_id"], r["recorded_at"])
            for r in discarded
        ]
        return found

    def table_heads(self) -> list[TableHead]:
        """Every live table and its latest version, in one query (for pollers)."""
        rows = self._store.fetch_all(query("live_table_heads"), {})
        return [
            TableHead(f"{r['namespace']}.{r['name']}", r["table_id"], int(r["version"]))
            for r in rows
        ]

    def live_table_ids(self, table_ids: Iterable[uuid.UUID]) -> set[uuid.UUID]:
        """Which of these table incarnations still exist (not dropped)."""
        rows = self._store.fetch_all(
            "SELECT table_id FROM table_info WHERE table_id = ANY(%(ids)s) AND dropped_at IS NULL",
            {"ids": list(table_ids)},
        )
        return {r["table_id"] for r in rows}

    def table_names(self, table_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str]:
        """``namespace.table`` of each of these table incarnations that still exists."""
        rows = self._store.fetch_all(query("live_table_names"), {"table_ids": list(table_ids)})
        return {r["table_id"]: f"{r['namespace']}.{r['name']}" for r in rows}

    def read_point(self, tables: Iterable[str]) -> dict[str, int]:
        """The latest versions of several tables, read at one instant (a consistent cut)."""
        metas = {name: self.load_table(name).meta for name in tables}
        rows = self._store.fetch_all(
            query("table_heads"), {"table_ids": [m.table_id for m in metas.values()]}
        )
        by_id = {r["table_id"]: r["version"] for r in rows}
        return {name: by_id[meta.table_id] for name, meta in metas.items()}

    # -- internals ---------------------------------------------------------------------------

    @property
    def store(self) -> PgStore:
        return self._store

    def _meta_from_row(self, row: Mapping[str, Any]) -> TableMeta:
        schema_rows = self._store.fetch_all(query("table_schemas"), {"table_id": row["table_id"]})
        return TableMeta(
            table_id=row["table_id"],
            name=TableName(row["namespace"], row["name"]),
            location=row["location"],
            spec=PartitionSpec(tuple(row["partition_columns"]), row["hash_buckets"]),
            primary_key=tuple(row["primary_key"]),
            properties=dict(row["properties"]),
            schemas={r["schema_id"]: schemas.deserialize(r["arrow_schema"]) for r in schema_rows},
            current_schema_id=row["current_schema_id"],
            created_at=row["created_at"],
        )

    def _init_warehouse(self, warehouse: str | Path | None) -> str | None:
        rows = self._store.fetch_all(
            "SELECT value FROM catalog_property WHERE key = %(key)s", {"key": WAREHOUSE_PROPERTY}
        )
        stored = rows[0]["value"] if rows else None
        if warehouse is None:
            return stored
        root = _warehouse_root(warehouse)
        if stored is None:
            self._store.fetch_all(
                "INSERT INTO catalog_property (key, value) VALUES (%(key)s, %(value)s) "
                "ON CONFLICT DO NOTHING RETURNING key",
                {"key": WAREHOUSE_PROPERTY, "value": root},
            )
        return root

    def _default_location(self, name: TableName, table_id: uuid.UUID) -> str:
        if self._warehouse is None:
            raise CatalogError(
                "no warehouse: pass warehouse= to Catalog.connect or location= to create_table"
            )
        return f"{self._warehouse.rstrip('/')}/{name.namespace}/{name.name}-{table_id.hex[:8]}"


class Table:
    """A handle on one table; metadata is as loaded (call :meth:`refresh` for newer schema)."""

    def __init__(self, catalog: Catalog, meta: TableMeta) -> None:
        self.catalog = catalog
        self.meta = meta

    def __repr__(self) -> str:
        return f"Table({self.name!r}, kind={self.meta.kind}, id={self.meta.table_id})"

    @property
    def name(self) -> str:
        return str(self.meta.name)

    @property
    def schema(self) -> pa.Schema:
        return self.meta.schema

    def refresh(self) -> Table:
        self.meta = self.catalog.load_table(self.name).meta
        return self

    def current_version(self) -> int:
        row = self.catalog.store.fetch_one(query("table_head"), {"table_id": self.meta.table_id})
        if row is None:
            raise TableNotFoundError(self.name)
        return int(row["version"])

    def resolve_version(self, version: int | None = None, as_of: dt.datetime | None = None) -> int:
        """The table version a read at ``version`` / ``as_of`` (default: latest) sees.

        Below the expiry horizon (see :meth:`expire_versions`) it raises
        :class:`VersionExpiredError` naming the oldest version kept."""
        if version is not None and as_of is not None:
            raise ValueError("give version or as_of, not both")
        latest = self.current_version()
        if version is not None:
            if not 0 <= version <= latest:
                raise VersionNotFoundError(f"{self.name} has versions 0..{latest}, not {version}")
            self._check_horizon(version, f"version {version}")
            return version
        if as_of is not None:
            at = as_of if as_of.tzinfo else as_of.replace(tzinfo=dt.UTC)
            row = self.catalog.store.fetch_one(
                query("version_at_time"), {"table_id": self.meta.table_id, "at": at}
            )
            found = int(row["version"]) if row is not None else 0
            self._check_horizon(found, f"time {at.isoformat()}")
            return found
        return latest

    def _check_horizon(self, version: int, asked: str) -> None:
        with self.catalog.store.connection() as conn, translate_errors():
            check_horizon(conn, self.meta, version, asked)

    def plan(
        self,
        *,
        version: int | None = None,
        as_of: dt.datetime | None = None,
        partitions: Sequence[str] | None = None,
        partition_filter: PartitionFilter | None = None,
    ) -> ScanPlan:
        """Which files a read of this table at a version sees, partition by partition.

        Raises:
            CatalogUnavailableError: the catalog database could not be reached. Reads fail
                fast (they are interactive); long-running writers wait outages out with
                :class:`catalog.OutageGuard` instead.
        """
        table_version = self.resolve_version(version, as_of)
        with self.catalog.store.connection() as conn, translate_errors(), conn.transaction():
            # one snapshot for the horizon and every row read, so a concurrent expiry either
            # shows its horizon (error) or none of its removals (see catalog.maintenance.expiry)
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            check_horizon(conn, self.meta, table_version, f"version {table_version}")
            if partitions is not None:
                found = partition_heads(conn, self.meta.table_id, partitions, table_version)
                heads = [h for h in found.values() if h is not None]
            else:
                heads = all_partition_heads(conn, self.meta.table_id, table_version)
            if partition_filter is not None:
                heads = [
                    h for h in heads if partition_filter(self.meta.spec.parse(h.partition_desc)[0])
                ]
            snapshots = load_snapshots(conn, self.meta.table_id, heads)
        return plan_scan(self.meta, table_version, snapshots)

    def history(self, limit: int = 100, after: int = 0) -> list[VersionInfo]:
        """Versions newest first: op, time, writer and batch, files and rows."""
        rows = self.catalog.store.fetch_all(
            query("table_history"),
            {"table_id": self.meta.table_id, "limit": limit, "after": after},
        )
        return [
            VersionInfo(
                version=r["version"],
                op=CommitOp(r["commit_op"]),
                committed_at=r["committed_at"],
                commit_id=r["commit_id"],
                writer_id=r["writer_id"],
                batch_id=r["batch_id"],
                summary=r["summary"],
            )
            for r in rows
        ]

    def commit(
        self,
        op: CommitOp,
        partitions: Sequence[PartitionCommit],
        *,
        base_version: int | None = None,
        key: IdempotencyKey | None = None,
        source_offsets: dict[str, object] | None = None,
        record_progress: bool = True,
    ) -> CommitResult:
        """Commit file operations to this table (the low-level API; see Catalog.commit).
        ``record_progress=False``: a one-off writer that keeps no progress row."""
        request = CommitRequest(
            tables=(
                TableCommit(
                    table=self.name, op=op, partitions=tuple(partitions), base_version=base_version
                ),
            ),
            key=key or IdempotencyKey.anonymous(),
            source_offsets=source_offsets,
            record_progress=record_progress,
        )
        return self.catalog.commit(request, known={self.name: self.meta})

    # -- data -------------------------------------------------------------------------------

    def scan(
        self,
        columns: Sequence[str] | None = None,
        filter: FilterSpec = None,
        version: int | None = None,
        as_of: dt.datetime | None = None,
    ) -> Scan:
        """Read the table at the latest version, a version, or a point in time.

        ``filter`` takes predicates such as ``[("region", "=", "eu"), ("id", ">", 10)]``
        (they prune partitions, buckets and files) or a ``pyarrow.compute`` expression.

        Raises:
            CatalogUnavailableError: the catalog database could not be reached (within the
                store's ``connect_timeout``). A read never waits out an outage: it is
                interactive, so it fails fast and leaves retrying to its caller.
        """
        self.refresh()
        scan_filter = ScanFilter.of(filter)
        pruned = partition_filter(self.meta, scan_filter)  # before any snapshot is loaded
        plan = self.plan(version=version, as_of=as_of, partition_filter=pruned)
        return Scan(self.meta, plan, columns, scan_filter)

    def append(
        self,
        data: pa.Table,
        *,
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
    ) -> CommitResult:
        """Append rows to an append table: files near the target size, one append commit."""
        self.refresh()
        return self._commit_rebasing(
            lambda base: stage_append(self.meta, data, options or DEFAULT_WRITE_OPTIONS, base),
            key,
            depends_on_state=False,
        )

    def upsert(
        self,
        data: pa.Table,
        *,
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
    ) -> CommitResult:
        """Insert or replace rows by primary key: one sorted run per touched bucket."""
        self.refresh()
        moves = not set(self.meta.spec.columns) <= set(self.meta.primary_key)

        def stage(base: int) -> TableCommit:
            changes = upserts(self.meta, data)
            if moves:  # a key whose partition value changed leaves its old partition
                changes = pa.concat_tables([changes, self._moved_key_deletes(changes, base)])
            return stage_changes(self.meta, changes, options or DEFAULT_WRITE_OPTIONS, base)

        return self._commit_rebasing(stage, key, depends_on_state=moves)

    @overload
    def delete(
        self,
        keys: pa.Table,
        *,
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
    ) -> CommitResult: ...

    @overload
    def delete(
        self,
        *,
        where: WhereSpec,
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
        retry: RetryPolicy | None = None,
    ) -> StatementResult: ...

    def delete(
        self,
        keys: pa.Table | None = None,
        *,
        where: WhereSpec | None = None,
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
        retry: RetryPolicy | None = None,
    ) -> CommitResult | StatementResult:
        """Delete rows by primary key (``keys``, CDC tables; partition columns are looked up
        when not given), or every row matching ``where`` (both table kinds, one commit; see
        :mod:`catalog.dml`)."""
        if (keys is None) == (where is None):
            raise TypeError("delete() takes keys (a pyarrow Table) or where=..., not both")
        if where is not None:
            return run_statement(self, where, None, key=key, options=options, retry=retry)
        assert keys is not None
        return self._delete_keys(keys, key=key, options=options)

    def update(
        self,
        *,
        where: WhereSpec,
        set: Mapping[str, object],
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
        retry: RetryPolicy | None = None,
    ) -> StatementResult:
        """Set columns of every row matching ``where`` (both table kinds, one commit).

        Append tables rewrite the files holding matches (an ``update`` commit); CDC tables
        write the matching keys' new rows as a merge run. A statement that loses to a
        concurrent append or merge is evaluated again on the new version (see
        :mod:`catalog.dml`)."""
        return run_statement(self, where, set, key=key, options=options, retry=retry)

    def _delete_keys(
        self,
        keys: pa.Table,
        *,
        key: IdempotencyKey | None = None,
        options: WriteOptions | None = None,
    ) -> CommitResult:
        self.refresh()
        lookup = not set(self.meta.spec.columns) <= set(keys.column_names)

        def stage(base: int) -> TableCommit:
            located = self._locate(keys, base) if lookup else keys
            return stage_changes(
                self.meta, deletes(self.meta, located), options or DEFAULT_WRITE_OPTIONS, base
            )

        return self._commit_rebasing(stage, key, depends_on_state=lookup)

    def _commit_rebasing(
        self,
        stage: Callable[[int], TableCommit],
        key: IdempotencyKey | None,
        *,
        depends_on_state: bool,
        attempts: int = 5,
    ) -> CommitResult:
        """Commit, and on a concurrent-write conflict rebase: re-stage only if the written
        content depended on the table's state (a key lookup); otherwise the same files land on
        the new version, which is what re-running the write would produce."""
        base = self.current_version()
        commit = stage(base)
        for attempt in range(1, attempts + 1):
            request = CommitRequest(tables=(commit,), key=key or IdempotencyKey.anonymous())
            try:
                return self.catalog.commit(request, known={self.name: self.meta})
            except CommitConflict as exc:
                if exc.kind is not ConflictKind.CONCURRENT_WRITE or attempt == attempts:
                    raise
                base = self.current_version()
                commit = (
                    stage(base)
                    if depends_on_state
                    else commit.model_copy(update={"base_version": base})
                )
        raise AssertionError("unreachable")

    def _locate(self, keys: pa.Table, version: int) -> pa.Table:
        """The given keys as they exist at ``version``, with their partition columns."""
        pk = list(self.meta.primary_key)
        missing = [c for c in pk if c not in keys.column_names]
        if missing:
            raise SchemaError(
                f"deletes need key column {missing[0]!r}", table=self.name, column=missing[0]
            )
        wanted = conform(self.meta, keys.select(pk), keys_only=True)
        columns = key_and_partition_columns(self.meta)
        if wanted.num_rows == 0:
            return pa.schema([self.meta.schema.field(c) for c in columns]).empty_table()
        found = Scan(
            self.meta,
            self.plan(version=version),
            columns,
            ScanFilter.of([(pk[0], "in", pc.unique(wanted.column(pk[0])).to_pylist())]),
        ).to_arrow()
        return found.join(wanted, keys=pk, join_type="inner")

    def _moved_key_deletes(self, changes: pa.Table, version: int) -> pa.Table:
        pk = list(self.meta.primary_key)
        parts = [c for c in self.meta.spec.columns if c not in pk]
        located = self._locate(changes.select(pk), version)
        if located.num_rows == 0:
            return deletes(self.meta, located)
        new = changes.select([*pk, *parts]).rename_columns([*pk, *(f"__new_{c}" for c in parts)])
        joined = located.join(new, keys=pk, join_type="inner")
        moved = None
        for column in parts:
            old_v, new_v = joined.column(column), joined.column(f"__new_{column}")
            differs = pc.fill_null(
                pc.not_equal(old_v, new_v), pc.xor(pc.is_null(old_v), pc.is_null(new_v))
            )
            moved = differs if moved is None else pc.or_(moved, differs)
        return deletes(self.meta, joined.filter(moved).select([*pk, *parts]))

    def evolve_schema(self, new_schema: pa.Schema, *, allow_drop: bool = False) -> Table:
        """Change the schema: add nullable columns, widen types, drop (if allowed) columns.

        Files written under older schemas read under the new one (added columns null, widened
        types cast). An incompatible change raises :class:`SchemaError` naming the column.
        """
        for _ in range(5):
            self.refresh()
            target = plan_schema_change(self.meta, new_schema, allow_drop=allow_drop)
            if target is None:
                return self
            with self.catalog.store.connection() as conn, translate_errors(), conn.transaction():
                conn.execute(query("lock_tables"), {"table_ids": [self.meta.table_id]})
                new_id = record_schema(
                    conn, self.meta.table_id, self.meta.current_schema_id, target
                )
            if new_id is not None:
                log.info("schema_changed", table=self.name, schema_id=new_id)
                return self.refresh()
        raise CatalogError(f"the schema of {self.name} kept changing; try again")

    def add_column(self, name: str, arrow_type: pa.DataType) -> Table:
        """Add a nullable column (old rows read it as null)."""
        self.refresh()
        return self.evolve_schema(self.schema.append(pa.field(name, arrow_type, nullable=True)))

    def widen_column(self, name: str, arrow_type: pa.DataType) -> Table:
        """Widen a column's type (int32 -> int64, float32 -> float64, larger decimal, ...)."""
        index = self._column_index(name)
        field = self.schema.field(index)
        return self.evolve_schema(self.schema.set(index, field.with_type(arrow_type)))

    def drop_column(self, name: str) -> Table:
        """Drop a column (its name can never be reused in this table)."""
        return self.evolve_schema(self.schema.remove(self._column_index(name)), allow_drop=True)

    def _column_index(self, name: str) -> int:
        self.refresh()
        index = self.schema.get_field_index(name)
        if index < 0:
            raise SchemaError(
                f"column {name!r} is not in {self.name}", table=self.name, column=name
            )
        return int(index)

    # -- maintenance ------------------------------------------------------------------------

    def expire_versions(
        self,
        *,
        older_than: dt.timedelta | None = None,
        retain_last: int | None = None,
        keep: int | None = None,
        dry_run: bool = False,
    ) -> ExpiryReport:
        """Expire versions older than ``older_than`` beyond the newest ``retain_last`` (defaults:
        the ``snapshot.time-retained`` / ``snapshot.retain-last`` properties, 7d / 100).

        Never the latest version, ``keep`` or newer, a writer's last idempotency key, or a
        prepared commit's rows. Files only expired versions used are handed to cleanup;
        :meth:`vacuum` deletes them. Time travel below the new horizon then raises
        :class:`VersionExpiredError`. See :mod:`catalog.maintenance.expiry`."""
        self.refresh()
        policy = MaintenancePolicy.of(self.meta)
        if older_than is not None and older_than < dt.timedelta(0):
            raise MaintenanceConfigError("older_than must not be negative", table=self.name)
        last = policy.retain_last if retain_last is None else retain_last
        return expire_versions(
            self.catalog.store,
            self.meta,
            older_than=policy.time_retained if older_than is None else older_than,
            retain_last=check_retain_last(last, self.name, "retain_last"),
            keep=keep,
            dry_run=dry_run,
        )

    def vacuum(
        self, *, older_than: dt.timedelta | None = None, dry_run: bool = False
    ) -> VacuumReport:
        """Delete files handed to cleanup and orphan files, older than ``older_than`` (default:
        the ``vacuum.older-than`` property, 1h), that no retained version and no prepared commit
        names. See :mod:`catalog.maintenance.vacuum` for why concurrent commits are safe."""
        self.refresh()
        threshold = MaintenancePolicy.of(self.meta).vacuum_older_than
        if older_than is not None and older_than < dt.timedelta(0):
            raise MaintenanceConfigError("older_than must not be negative", table=self.name)
        return Vacuum(
            self.catalog.store,
            self.meta,
            older_than=threshold if older_than is None else older_than,
        ).run(dry_run=dry_run)

    def drop_expired_partitions(
        self,
        *,
        ttl: dt.timedelta | None = None,
        now: dt.datetime | None = None,
        dry_run: bool = False,
    ) -> TtlReport | None:
        """Drop the partitions older than ``ttl`` (default: the ``partition.ttl`` property) in
        one ``update`` commit; None when the table has no TTL."""
        self.refresh()
        policy = MaintenancePolicy.of(self.meta)
        window = ttl if ttl is not None else policy.partition_ttl
        if window is None:
            return None
        return drop_expired_partitions(
            self, ttl=window, column=ttl_column(self.meta), now=now, dry_run=dry_run
        )

    def describe(self) -> dict[str, Any]:
        meta = self.meta
        return {
            "name": self.name,
            "table_id": str(meta.table_id),
            "kind": meta.kind,
            "location": meta.location,
            "primary_key": list(meta.primary_key),
            "partition_by": list(meta.spec.columns),
            "hash_buckets": meta.spec.hash_buckets,
            "schema_id": meta.current_schema_id,
            "schema": [
                {"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in meta.schema
            ],
            "properties": dict(meta.properties),
            "version": self.current_version(),
        }


class Transaction:
    """Collects table commits and lands them as ONE atomic catalog commit on exit.

    If the block raises, nothing is committed (files already written stay as leftovers for
    maintenance). ``result`` holds the :class:`CommitResult` after a successful exit.
    """

    def __init__(
        self,
        catalog: Catalog,
        key: IdempotencyKey | None,
        source_offsets: dict[str, object] | None,
    ) -> None:
        self.catalog = catalog
        self.key = key or IdempotencyKey.anonymous()
        self.source_offsets = source_offsets
        self._tables: dict[str, TableCommit] = {}
        self.result: CommitResult | None = None

    def add(self, commit: TableCommit) -> None:
        name = str(parse_table_name(commit.table))
        if name in self._tables:
            raise CatalogError(f"{name} is already part of this transaction")
        self._tables[name] = commit.model_copy(update={"table": name})

    def commit_files(
        self,
        table: str | Table,
        op: CommitOp,
        partitions: Sequence[PartitionCommit],
        base_version: int | None = None,
    ) -> None:
        name = table.name if isinstance(table, Table) else table
        self.add(
            TableCommit(table=name, op=op, partitions=tuple(partitions), base_version=base_version)
        )

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None or not self._tables:
            return
        self.result = self.catalog.commit(
            CommitRequest(
                tables=tuple(self._tables.values()),
                key=self.key,
                source_offsets=self.source_offsets,
            )
        )


def _spec_for(
    name: TableName,
    primary_key: Sequence[str],
    hash_buckets: int | None,
    partition_by: Sequence[str],
) -> PartitionSpec:
    if isinstance(primary_key, str) or isinstance(partition_by, str):
        raise SchemaError(
            "primary_key and partition_by take a list of column names", table=str(name)
        )
    if primary_key:
        buckets = DEFAULT_HASH_BUCKETS if hash_buckets is None else hash_buckets
        if buckets == UNAWARE_BUCKET:
            raise SchemaError(
                "a table with a primary key needs hash buckets (>= 1)", table=str(name)
            )
    else:
        if hash_buckets not in (None, UNAWARE_BUCKET):
            raise SchemaError(
                "hash buckets need a primary key; append tables use bucket -1", table=str(name)
            )
        buckets = UNAWARE_BUCKET
    if len(set(primary_key)) != len(primary_key):
        raise SchemaError("a primary-key column is named twice", table=str(name))
    try:
        return PartitionSpec(tuple(partition_by), buckets)
    except ValueError as exc:
        raise SchemaError(str(exc), table=str(name)) from exc


def _check_properties(properties: Mapping[str, str]) -> dict[str, str]:
    checked = {}
    for key, value in properties.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidNameError(str(key), "table properties are string keys and values")
        checked[key] = value
    json.dumps(checked)
    return checked


def _warehouse_root(warehouse: str | Path) -> str:
    text = str(warehouse)
    if "://" in text and not text.startswith("file://"):
        raise CatalogError(f"only local warehouses are supported for now, got {text!r}")
    path = Path(text.removeprefix("file://")).expanduser().resolve()
    return str(path)
