"""Registered readers of a table's change feed, which snapshot expiry waits for.

A consumer (a streaming job, an indexer) records the last version it has read. Expiry keeps
that version and every newer one while the consumer is alive (registered or advanced within its
``ttl``), so its next read, ``changes(version + 1, ...)``, always finds the state it is computed
against; vacuum then deletes nothing those versions name, since only expiry hands files to it.
A consumer that stops advancing for longer than its ttl stops protecting anything: a dead
reader cannot pin a table forever. Its row stays, so when it comes back behind the horizon it
fails with :class:`~catalog.errors.ChangesExpiredError` naming both versions, never skipping
changes silently (Delta's lagging stream loses data there).

Why the check cannot be blind: registering and advancing check the horizon while holding the
table's head lock, and expiry re-reads the live consumers' floor under the same lock right
before it records a new horizon. Either the consumer's row is there when expiry decides, or the
horizon is there when the consumer checks - never neither.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from catalog.changes import check_base, cquery
from catalog.errors import ChangeFeedError, ConsumerNotFoundError
from catalog.meta import TableMeta
from catalog.queries import query
from catalog.store import PgStore, translate_errors

#: How long a consumer protects its versions after it was last seen, unless told otherwise.
DEFAULT_CONSUMER_TTL = dt.timedelta(days=7)


@dataclass(frozen=True)
class Consumer:
    """A registered reader of one table's changes."""

    table: str
    consumer_id: str
    version: int
    """The last version it has read: it reads changes from ``version + 1`` on."""
    ttl: dt.timedelta
    registered_at: dt.datetime
    seen_at: dt.datetime
    alive: bool
    """Seen within its ttl: expiry keeps its versions. A dead consumer keeps nothing."""

    @property
    def next_version(self) -> int:
        return self.version + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "consumer_id": self.consumer_id,
            "version": self.version,
            "ttl_seconds": self.ttl.total_seconds(),
            "registered_at": self.registered_at.isoformat(),
            "seen_at": self.seen_at.isoformat(),
            "alive": self.alive,
        }


def _consumer(meta: TableMeta, row: Any) -> Consumer:
    return Consumer(
        table=str(meta.name),
        consumer_id=row["consumer_id"],
        version=int(row["version"]),
        ttl=row["ttl"],
        registered_at=row["registered_at"],
        seen_at=row["seen_at"],
        alive=bool(row["alive"]),
    )


def _check_args(meta: TableMeta, consumer_id: str, version: int) -> None:
    name = str(meta.name)
    if not consumer_id or not consumer_id.strip():
        raise ChangeFeedError("a consumer id must not be empty", table=name)
    if version < 0:
        raise ChangeFeedError(f"{name}: a consumer's version must be >= 0", table=name)


def register(
    store: PgStore,
    meta: TableMeta,
    consumer_id: str,
    version: int,
    ttl: dt.timedelta = DEFAULT_CONSUMER_TTL,
) -> Consumer:
    """Register (or re-register: position and ttl replaced) a consumer at ``version``, the last
    version it has read. Fails if the changes after it are already expired."""
    _check_args(meta, consumer_id, version)
    if ttl <= dt.timedelta(0):
        raise ChangeFeedError(
            f"{meta.name}: a consumer's ttl must be positive", table=str(meta.name)
        )
    return _write(store, meta, consumer_id, version, "upsert_consumer", ttl=ttl)


def advance(store: PgStore, meta: TableMeta, consumer_id: str, version: int) -> Consumer:
    """Move a consumer to ``version`` (the last version it has now read) and renew its ttl."""
    _check_args(meta, consumer_id, version)
    return _write(store, meta, consumer_id, version, "advance_consumer", ttl=None)


def _write(
    store: PgStore,
    meta: TableMeta,
    consumer_id: str,
    version: int,
    statement: str,
    *,
    ttl: dt.timedelta | None,
) -> Consumer:
    from catalog.maintenance.expiry import mquery

    with store.connection() as conn, translate_errors(), conn.transaction():
        head = conn.execute(query("lock_tables"), {"table_ids": [meta.table_id]}).fetchone()
        if head is not None and version > int(head["version"]):
            raise ChangeFeedError(
                f"{meta.name} has versions 0..{head['version']}, a consumer cannot be at {version}",
                table=str(meta.name),
            )
        horizon = conn.execute(mquery("expiry_horizon"), {"table_id": meta.table_id}).fetchone()
        expired = horizon is not None and version < horizon["oldest_version"]
        row = None
        if not expired:
            row = conn.execute(
                cquery(statement),
                {
                    "table_id": meta.table_id,
                    "consumer_id": consumer_id,
                    "version": version,
                    "ttl": ttl,
                },
            ).fetchone()
    if expired:
        check_base(store, meta, version + 1, consumer_id=consumer_id)  # raises: names both
    if row is None:
        raise ConsumerNotFoundError(str(meta.name), consumer_id)
    return _consumer(meta, row)


def get(store: PgStore, meta: TableMeta, consumer_id: str, *, check: bool = True) -> Consumer:
    """A consumer; with ``check``, :class:`~catalog.errors.ChangesExpiredError` (one line,
    naming both versions) if the versions after its position were expired meanwhile."""
    row = store.fetch_one(
        cquery("get_consumer"), {"table_id": meta.table_id, "consumer_id": consumer_id}
    )
    if row is None:
        raise ConsumerNotFoundError(str(meta.name), consumer_id)
    consumer = _consumer(meta, row)
    if check:
        check_base(store, meta, consumer.next_version, consumer_id=consumer_id)
    return consumer


def list_all(store: PgStore, meta: TableMeta) -> list[Consumer]:
    rows = store.fetch_all(cquery("list_consumers"), {"table_id": meta.table_id})
    return [_consumer(meta, r) for r in rows]


def drop(store: PgStore, meta: TableMeta, consumer_id: str) -> bool:
    """Forget a consumer (True if it was registered): expiry no longer waits for it."""
    row = store.fetch_one(
        cquery("drop_consumer"), {"table_id": meta.table_id, "consumer_id": consumer_id}
    )
    return row is not None
