"""The catalog's entry point: connect, create, load and drop tables, and commit across tables.

Tables live in :mod:`catalog.table`, multi-table commits in :mod:`catalog.transaction`.

Engine-independent by design: a Spark job, the compactor, a Flink or Trino connector or a plain
Python program all read and commit through these objects (and never need pyspark).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, overload

import pyarrow as pa
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb

from catalog import consumers, schemas
from catalog.committer import Committer
from catalog.consumers import DEFAULT_CONSUMER_TTL, Consumer
from catalog.errors import (
    CatalogError,
    InvalidNameError,
    NamespaceNotEmptyError,
    SchemaError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from catalog.files.storage import (
    DEFAULT_STORAGE,
    StorageOptions,
    normalize_warehouse,
    parse_location,
)
from catalog.files.vectors import entry_paths
from catalog.logs import get_logger
from catalog.meta import SEQUENCE_COLUMN_PROPERTY, TableMeta
from catalog.model import (
    UNAWARE_BUCKET,
    CommitRequest,
    CommitResult,
    IdempotencyKey,
    SourceWatermark,
)
from catalog.names import TableName, check_identifier, parse_table_name
from catalog.partitioning import PartitionSpec
from catalog.queries import query
from catalog.readpoint import NoConsistentCutError, ReadPoint, consistent_cut, marks_from_rows
from catalog.retry import RetryPolicy
from catalog.store import PgStore, StoreSettings, translate_errors
from catalog.table import Table
from catalog.transaction import Transaction

log = get_logger("lakestream.catalog")

DEFAULT_HASH_BUCKETS = 4
#: Versions per table read first when choosing a consistent read point.
_FIRST_HISTORY_PAGE = 64
WAREHOUSE_PROPERTY = "warehouse"


@dataclass(frozen=True)
class WriterProgress:
    writer_id: str
    batch_id: int
    commit_id: uuid.UUID
    source_offsets: Any
    updated_at: dt.datetime
    table_ids: list[uuid.UUID]
    source_watermark: SourceWatermark | None = None
    """Up to where the writer's last commit made its tables transaction-consistent."""
    job_state: dict[str, object] | None = None
    """The writer's own state stored with its last commit (see CommitRequest.job_state)."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WriterProgress:
        mark = row.get("source_watermark")
        return cls(
            **{**row, "source_watermark": SourceWatermark.model_validate(mark) if mark else None}
        )


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

    def __init__(
        self,
        store: PgStore,
        retry: RetryPolicy,
        warehouse: str | None,
        storage: StorageOptions = DEFAULT_STORAGE,
    ) -> None:
        self._store = store
        self._committer = Committer(store, retry)
        self._warehouse = warehouse
        self._storage = storage

    @classmethod
    def connect(
        cls,
        dsn: str,
        *,
        warehouse: str | Path | None = None,
        settings: StoreSettings | None = None,
        retry: RetryPolicy | None = None,
        schema: str | None = None,
        create: bool = True,
        storage: StorageOptions | None = None,
    ) -> Catalog:
        """Connect to the catalog in PostgreSQL schema ``schema`` (default: ``settings.schema``,
        ``lakestream``); remember the warehouse root.

        ``warehouse`` is a local path or an object-store URI (``s3://bucket/prefix``, ``gs://``,
        ``abfs://``, ``hdfs://``; see :mod:`catalog.files.storage`). ``storage`` says how this
        process reaches the store (region, endpoint, path-style, keys); without it the store's
        standard credential chain is used. Only the URI is stored in the catalog, never options.

        ``create=True`` (writers; the default, as pyiceberg's SQL catalog creates its tables on
        first use) creates the catalog, or migrates it - also out of ``public``, where catalogs
        made before it had a schema of its own live. ``create=False`` (readers, and every
        ``lakestream`` command but ``catalog init``) writes nothing: it raises
        :class:`CatalogNotInitializedError` when there is no catalog or it needs migrating, and
        does not store ``warehouse`` in the catalog.

        Raises:
            InvalidNameError: ``schema`` is not a plain lower-case identifier.
            CatalogNotInitializedError: ``create=False`` and there is no catalog, or it needs
                migrating (``lakestream catalog init``).
            CatalogUnavailableError: the catalog database could not be reached.
            StorageError: the warehouse is not a location lakestream can use (unknown scheme, no
                bucket, credentials in the URI).
        """
        root = normalize_warehouse(warehouse) if warehouse is not None else None
        base = settings or StoreSettings()
        store = PgStore(dsn, base if schema is None else replace(base, schema=schema))
        store.open(create=create)
        catalog = cls(store, retry or RetryPolicy(), None, storage or DEFAULT_STORAGE)
        catalog._warehouse = catalog._init_warehouse(root, store_it=create)
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

    @property
    def storage(self) -> StorageOptions:
        """How this process reaches the warehouse's store (never stored in the catalog)."""
        return self._storage

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
        """Create a CDC table (``primary_key`` given) or an append table (bucket -1).

        Raises:
            TableAlreadyExistsError: a live table has the name.
            InvalidNameError: the name or a property is not allowed.
            SchemaError: the schema, key, partitioning or buckets do not fit together.
            CatalogError: no warehouse and no ``location``.
            StorageError: ``location`` has an unknown scheme or names no bucket.
            CatalogUnavailableError: the catalog database could not be reached.
        """
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
        if location is not None:
            parse_location(location)  # an unusable location fails before anything is created
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
        """The live table of that name (``namespace.table``).

        Raises:
            TableNotFoundError: no live table has the name.
            InvalidNameError: the name is not a valid table name.
            CatalogUnavailableError: the catalog database could not be reached.
        """
        table_name = parse_table_name(name)
        row = self._store.fetch_one(
            query("table_by_name"), {"namespace": table_name.namespace, "name": table_name.name}
        )
        if row is None:
            raise TableNotFoundError(str(table_name))
        return Table(self, self._meta_from_row(row))

    # -- change-feed consumers (see catalog.consumers) ----------------------------------------

    def register_consumer(
        self,
        table: str | Table,
        consumer_id: str,
        version: int,
        *,
        ttl: dt.timedelta = DEFAULT_CONSUMER_TTL,
    ) -> Consumer:
        """Register a reader of ``table``'s changes at ``version``, the last version it has
        read: expiry keeps that version and all newer ones while the consumer is seen within
        ``ttl`` (registering again replaces position and ttl).

        Raises:
            ChangesExpiredError: the versions after ``version`` were already expired (it names
                both versions).
            ChangeFeedError: an empty id, a negative or future version, a ttl that is not
                positive.
            CatalogUnavailableError: the catalog database could not be reached.
        """
        meta = self._consumer_table(table)
        return consumers.register(self._store, meta, consumer_id, version, ttl)

    def advance_consumer(self, table: str | Table, consumer_id: str, version: int) -> Consumer:
        """Record that the consumer has read up to ``version`` (and renew its ttl).

        Raises:
            ConsumerNotFoundError: it is not registered (or was dropped).
            ChangesExpiredError: ``version`` lies below the expiry horizon.
        """
        meta = self._consumer_table(table)
        return consumers.advance(self._store, meta, consumer_id, version)

    def consumer(self, table: str | Table, consumer_id: str) -> Consumer:
        """A registered consumer, checked: raises :class:`ChangesExpiredError` (one line, both
        versions) when the changes after its position were expired (it was dead past its ttl),
        :class:`ConsumerNotFoundError` when it is not registered."""
        return consumers.get(self._store, self._consumer_table(table), consumer_id)

    def consumers(self, table: str | Table) -> list[Consumer]:
        """The table's registered consumers, dead ones (past their ttl) included."""
        return consumers.list_all(self._store, self._consumer_table(table))

    def drop_consumer(self, table: str | Table, consumer_id: str) -> bool:
        """Forget a consumer; expiry no longer keeps versions for it. True if it existed."""
        return consumers.drop(self._store, self._consumer_table(table), consumer_id)

    def _consumer_table(self, table: str | Table) -> TableMeta:
        return table.meta if isinstance(table, Table) else self.load_table(table).meta

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
        """Drop an empty namespace.

        Raises:
            NamespaceNotEmptyError: it still holds tables.
            CatalogUnavailableError: the catalog database could not be reached.
        """
        ns = check_identifier(namespace, "namespace")
        if self.list_tables(ns):
            raise NamespaceNotEmptyError(ns)
        self._store.fetch_all(
            "DELETE FROM namespace n WHERE name = %(name)s AND NOT EXISTS "
            "(SELECT 1 FROM table_info t WHERE t.namespace = n.name) RETURNING name",
            {"name": ns},
        )

    def drop_table(self, name: str) -> None:
        """Drop a table: it disappears at once; its files stay until maintenance purges them.

        Raises:
            TableNotFoundError: no live table has the name.
            CatalogUnavailableError: the catalog database could not be reached (or the table
                stayed locked by committers past ``lock_timeout``).
        """
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

        Raises:
            CommitConflict: a concurrent commit won (the conflict matrix failed this one), or
                the tables stayed locked past the retry policy (kind ``busy``).
            CommitRejected: a table was dropped, or the request can never land as it is.
            CommitStateUnknown: the connection died during COMMIT and the outcome could not be
                looked up; keep the files and call :meth:`resolve_commit`.
            CatalogUnavailableError: the database could not be reached; nothing landed.
            TableNotFoundError: a table of the request does not exist.
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
        """The commit made under (writer_id, batch_id), or None if it never landed.

        Raises:
            CatalogUnavailableError: the catalog database could not be reached.
        """
        return self._committer.resolve(IdempotencyKey(writer_id=writer_id, batch_id=batch_id))

    def writer_progress(self, writer_id: str) -> WriterProgress | None:
        row = self._store.fetch_one(query("writer_progress"), {"writer_id": writer_id})
        return WriterProgress.from_row(row) if row else None

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
                tuple(
                    dict.fromkeys(  # entries of a commit share its vector file
                        path
                        for op in r["file_ops"]
                        if op["action"] == "add"
                        for path in entry_paths(op["file"])
                    )
                ),
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

    @overload
    def read_point(
        self, tables: Iterable[str], consistent: Literal[False] = False
    ) -> dict[str, int]: ...

    @overload
    def read_point(self, tables: Iterable[str], consistent: Literal[True]) -> ReadPoint: ...

    def read_point(
        self, tables: Iterable[str], consistent: bool = False
    ) -> dict[str, int] | ReadPoint:
        """The latest versions of several tables, read at one instant (a consistent cut of the
        catalog); with ``consistent=True`` the newest cut at which they also hold whole source
        transactions, with its source watermark.

        One job's batch commits are atomic over its tables and publish a prefix of the source's
        transactions, so its tables' latest versions read at one instant are that cut - unless
        a version went out with exceptions (``on_timeout: publish``): such a version holds part
        of a transaction, so the cut steps back below it, for every table of the job. Tables fed
        by several jobs get, each, the newest version at or below the smallest of the jobs'
        latest points: whole transactions only at the jobs' batch boundaries (see
        :mod:`catalog.readpoint`).

        Raises:
            TableNotFoundError: a table does not exist.
            NoConsistentCutError: ``consistent=True`` and a table has no source watermark (it
                was written in ``eventual`` mode or by batch writes), or none old enough.
            CatalogUnavailableError: the catalog database could not be reached.
        """
        metas = {name: self.load_table(name).meta for name in tables}
        ids = [m.table_id for m in metas.values()]
        rows = self._store.fetch_all(query("table_heads"), {"table_ids": ids})
        by_id = {r["table_id"]: r["version"] for r in rows}
        heads = {name: by_id[meta.table_id] for name, meta in metas.items()}
        if not consistent:
            return heads
        return self._consistent_cut(metas, [by_id[m.table_id] for m in metas.values()])

    def _consistent_cut(self, metas: Mapping[str, TableMeta], heads: list[int]) -> ReadPoint:
        """The cut from the tables' newest versions, reading further back only when they do
        not settle it (the cut is nearly always at or next to the heads)."""
        ids = [m.table_id for m in metas.values()]
        limit = _FIRST_HISTORY_PAGE
        while True:
            rows = self._store.fetch_all(
                query("table_watermarks"), {"table_ids": ids, "heads": heads, "limit": limit}
            )
            by_table: dict[uuid.UUID, list[Mapping[str, Any]]] = {i: [] for i in ids}
            for row in rows:
                by_table[row["table_id"]].append(row)
            try:
                return consistent_cut(
                    {name: marks_from_rows(by_table[m.table_id]) for name, m in metas.items()}
                )
            except NoConsistentCutError:
                # an older version may settle it, unless every history was read whole
                if all(len(found) < limit for found in by_table.values()):
                    raise
            limit *= 4

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
            storage=self._storage,
        )

    def _init_warehouse(self, root: str | None, *, store_it: bool) -> str | None:
        rows = self._store.fetch_all(
            "SELECT value FROM catalog_property WHERE key = %(key)s", {"key": WAREHOUSE_PROPERTY}
        )
        stored = rows[0]["value"] if rows else None
        if root is None:
            return stored
        if stored is None and store_it:
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
