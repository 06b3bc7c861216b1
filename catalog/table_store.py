"""One table's statements against the catalog database, named, so :class:`catalog.table.Table`
holds no SQL and opens no connection itself.

Beside :mod:`catalog.store` rather than in it: the store is the driver seam (pool, error
translation) that :mod:`catalog.maintenance.expiry` and the committer build on, and these
functions build on them in turn (the expiry horizon, snapshots, schema records). Each function
is one unit of work: it takes a pooled connection, runs its queries from ``sql/queries.sql``
(in one transaction where they must agree) and gives back typed values.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Sequence

import pyarrow as pa

from catalog.maintenance.expiry import check_horizon
from catalog.meta import TableMeta
from catalog.queries import NamedQueries, query
from catalog.schema_changes import record_schema
from catalog.snapshots import (
    PartitionHead,
    PartitionSnapshot,
    all_partition_heads,
    load_snapshots,
    partition_heads,
)
from catalog.store import PgStore, Row, translate_errors


def head_version(store: PgStore, table_id: uuid.UUID) -> int | None:
    """The table's latest version; None when the table has no head (it was dropped)."""
    row = store.fetch_one(query("table_head"), {"table_id": table_id})
    return None if row is None else int(row["version"])


def version_at(store: PgStore, table_id: uuid.UUID, at: dt.datetime) -> int:
    """The newest version committed at or before ``at``; 0 (the empty table) when none was."""
    row = store.fetch_one(query("version_at_time"), {"table_id": table_id, "at": at})
    return int(row["version"]) if row is not None else 0


def require_unexpired(store: PgStore, meta: TableMeta, version: int, asked: str) -> None:
    """Raise :class:`VersionExpiredError` (naming ``asked``) if ``version`` lies below the
    table's expiry horizon."""
    with store.connection() as conn, translate_errors():
        check_horizon(conn, meta, version, asked)


def snapshots_at(
    store: PgStore,
    meta: TableMeta,
    version: int,
    *,
    partitions: Sequence[str] | None = None,
    keep: Callable[[PartitionHead], bool] | None = None,
) -> list[PartitionSnapshot]:
    """The live files of each partition of the table at ``version`` (only ``partitions``, when
    named; only the heads ``keep`` accepts, when given).

    One REPEATABLE READ, read-only snapshot covers the horizon and every row read, so a
    concurrent expiry either shows its horizon (:class:`VersionExpiredError`) or none of its
    removals (see :mod:`catalog.maintenance.expiry`)."""
    with store.connection() as conn, translate_errors(), conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        check_horizon(conn, meta, version, f"version {version}")
        if partitions is not None:
            found = partition_heads(conn, meta.table_id, partitions, version)
            heads = [h for h in found.values() if h is not None]
        else:
            heads = all_partition_heads(conn, meta.table_id, version)
        if keep is not None:
            heads = [h for h in heads if keep(h)]
        return load_snapshots(conn, meta.table_id, heads)


def iceberg_state(store: PgStore, table_id: uuid.UUID) -> Row | None:
    """Where the table's Iceberg metadata is and how far it got (``catalog.iceberg``), without
    loading pyiceberg; None when it was never exported."""
    return store.fetch_one(
        NamedQueries("catalog", "sql/iceberg.sql")("iceberg_pointer"), {"table_id": table_id}
    )


def bytes_by_op(store: PgStore, table_id: uuid.UUID, window: dt.timedelta) -> list[Row]:
    """Per commit op: versions, bytes added and bytes written within ``window`` of the newest."""
    return store.fetch_all(query("table_bytes_by_op"), {"table_id": table_id, "window": window})


def history_rows(store: PgStore, table_id: uuid.UUID, *, limit: int, after: int) -> list[Row]:
    """The table's versions above ``after``, newest first, at most ``limit`` of them."""
    return store.fetch_all(
        query("table_history"), {"table_id": table_id, "limit": limit, "after": after}
    )


def change_schema(store: PgStore, meta: TableMeta, target: pa.Schema) -> int | None:
    """Record ``target`` as the table's next schema, holding the table's head lock so schema
    ids stay contiguous; the new schema id, or None when another schema change landed after
    ``meta`` was loaded (the caller plans again on the schema that won)."""
    with store.connection() as conn, translate_errors(), conn.transaction():
        conn.execute(query("lock_tables"), {"table_ids": [meta.table_id]})
        return record_schema(conn, meta.table_id, meta.current_schema_id, target)
