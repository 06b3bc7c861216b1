"""The commit protocol: prepare, publish under the table locks, resolve conflicts, retry.

A commit happens in two transactions, after the data files are written:

1. **prepare** - insert the commit's file ops into ``data_commit_info``. Nothing is visible to
   readers yet, but a writer that dies from here on leaves rows that name its files (rows whose
   commit id never got a ``commit_key`` row), so maintenance can find them.
2. **publish** - lock the ``table_head`` row of every touched table (in table-id order, so
   multi-table commits never deadlock), then for every touched partition read what landed since
   the commit's base version, resolve it by the conflict matrix, insert the next partition
   versions, advance each table head, and record the idempotency key and the writer's progress.
   All of it commits atomically, across partitions and across tables.

Why this is not blind under READ COMMITTED: every statement after ``SELECT ... FOR UPDATE`` on the
head rows takes a fresh snapshot, and no other committer can publish to those tables until we
commit, so what we read after the lock is exactly the latest state we build on. (Under
REPEATABLE READ the snapshot would be taken before the lock was granted and the lock itself would
fail with a serialization error whenever another commit got in first; READ COMMITTED plus the lock
gives the same safety with waiting instead of aborting.) The primary key
``(table_id, partition_desc, version)`` remains a backstop: a client that skipped the lock could
not publish the same version twice.

With the lock, the matrix's "retry" case (append after append) is a rebase done in place, so
concurrent appends never fail and never lose a commit. The retry loop around the whole protocol is
for what the lock cannot prevent: lock timeouts, dropped connections, database restarts.

A connection that dies while COMMIT is in flight leaves the outcome unknown. The key decides it:
on a new connection we take the same head locks (waiting out a backend that may still be
finishing) and look the key up. Found - it landed. Absent - it did not, and we try again.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb
from pydantic import BaseModel

from catalog import conflicts, schemas
from catalog.errors import (
    CatalogUnavailableError,
    CommitConflict,
    CommitRejected,
    CommitStateUnknown,
    ConflictKind,
    SchemaError,
    UnavailableKind,
)
from catalog.logs import get_logger
from catalog.meta import TableMeta
from catalog.model import (
    CommitOp,
    CommitRequest,
    CommitResult,
    FileAction,
    FileOp,
    IdempotencyKey,
    PartitionCommit,
    TableCommit,
    TableCommitResult,
)
from catalog.queries import query
from catalog.retry import RetryPolicy
from catalog.schema_changes import plan_schema_change, record_schema
from catalog.snapshots import (
    PartitionHead,
    head_from_row,
    heads_from_rows,
    load_snapshots,
    send_partition_heads,
)
from catalog.store import CommitState, PgStore, pipelined_transaction, translate_errors

log = get_logger("lakestream.catalog.commit")

#: Every publish notifies this channel with the id of each table it gave a new version
#: (``LISTEN lakestream_commit``); the compactor's coordinator wakes on it.
COMMIT_CHANNEL = "lakestream_commit"
_ONE_MICROSECOND = dt.timedelta(microseconds=1)
#: "The latest" as a table-version bound (see _Publication._send_reads).
_LATEST = 2**62


class _CommitSent(Exception):
    """The connection failed after COMMIT was sent: the outcome is unknown."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass
class _PartitionPlan:
    """What publishing decided for one partition of one table."""

    commit: PartitionCommit
    landed: list[conflicts.Landed] = field(default_factory=list)
    head: PartitionHead | None = None
    chain: conflicts.Chain | None = None  # None: discarded
    full_state: tuple[FileOp, ...] | None = None
    """For a landing reset op: the partition's whole file set after it (see _materialize)."""


class _Reads(NamedTuple):
    """What a publication reads under the lock, queued to arrive in one round trip."""

    locks: psycopg.Cursor[DictRow]
    key: psycopg.Cursor[DictRow]
    heads: dict[str, psycopg.Cursor[DictRow]]


@dataclass(frozen=True)
class _LockedTable:
    table_id: uuid.UUID
    version: int
    committed_at: dt.datetime
    dropped: bool


class Committer:
    def __init__(self, store: PgStore, policy: RetryPolicy) -> None:
        self._store = store
        self._policy = policy

    def commit(self, request: CommitRequest, metas: Mapping[str, TableMeta]) -> CommitResult:
        """Commit ``request``; raises CommitConflict, CommitRejected or CommitStateUnknown."""
        validate_request(request, metas)
        commit_id = uuid.uuid4()
        last_error: Exception | None = None
        unknown = False
        for attempt in self._policy.attempts_iter():
            try:
                result = self._prepare_and_publish(request, metas, commit_id)
                return result.model_copy(update={"attempts": attempt})
            except (CommitConflict, CommitRejected) as exc:
                # definitely not landed: the caller may commit the same files again, so the
                # prepared rows must not survive to call them leftovers
                self._forget_prepared(request, metas, commit_id)
                if isinstance(exc, CommitConflict):
                    _log_conflict(request, exc)
                raise
            except _CommitSent as exc:
                unknown, last_error = True, exc.cause
                found = self._resolve_after_failure(request, metas)
                if found is not None:
                    return found.model_copy(update={"attempts": attempt, "replayed": False})
                unknown = False  # definitely not landed: safe to try again
            except CatalogUnavailableError as exc:
                last_error = exc
            log.warning(
                "commit_retry",
                attempt=attempt,
                error=str(last_error),
                writer_id=request.key.writer_id,
                batch_id=request.key.batch_id,
            )
        raise self._exhausted(request, last_error, unknown)

    def resolve(self, key: IdempotencyKey) -> CommitResult | None:
        """The result of the commit made under ``key``, or None if it never landed."""
        with self._store.connection() as conn, translate_errors():
            return _find_key(conn, key)

    def _prepare_and_publish(
        self, request: CommitRequest, metas: Mapping[str, TableMeta], commit_id: uuid.UUID
    ) -> CommitResult:
        with self._store.connection() as conn:  # one checkout (and pool check) for both
            self._prepare(conn, request, metas, commit_id)
            return self._publish(conn, request, metas, commit_id)

    # -- prepare -----------------------------------------------------------------------------

    def _prepare(
        self,
        conn: psycopg.Connection[DictRow],
        request: CommitRequest,
        metas: Mapping[str, TableMeta],
        commit_id: uuid.UUID,
    ) -> None:
        with translate_errors(), pipelined_transaction(conn):  # one round trip
            for tc in request.tables:
                conn.execute(
                    query("insert_data_commits"),
                    {
                        "table_id": metas[tc.table].table_id,
                        "commit_id": commit_id,
                        "commit_op": tc.op.value,
                        "descs": [p.partition_desc for p in tc.partitions],
                        "ops": "[" + ",".join(_ops_json(p) for p in tc.partitions) + "]",
                    },
                )

    def _forget_prepared(
        self, request: CommitRequest, metas: Mapping[str, TableMeta], commit_id: uuid.UUID
    ) -> None:
        try:
            with self._store.connection() as conn, translate_errors(), conn.transaction():
                conn.execute(
                    query("forget_prepared"),
                    {
                        "table_ids": [metas[tc.table].table_id for tc in request.tables],
                        "commit_id": commit_id,
                    },
                )
        except CatalogUnavailableError as exc:  # harmless: the rows stay, naming unused files
            log.warning("forget_prepared_failed", commit_id=str(commit_id), error=str(exc))

    # -- publish -----------------------------------------------------------------------------

    def _publish(
        self,
        conn: psycopg.Connection[DictRow],
        request: CommitRequest,
        metas: Mapping[str, TableMeta],
        commit_id: uuid.UUID,
    ) -> CommitResult:
        state = CommitState()
        try:
            with translate_errors(), pipelined_transaction(conn) as state:
                result = _Publication(conn, request, metas, commit_id).run()
            return result
        except CatalogUnavailableError as exc:
            if state.sent and exc.kind is not UnavailableKind.LOCK_BUSY:
                raise _CommitSent(exc) from exc
            raise

    def _resolve_after_failure(
        self, request: CommitRequest, metas: Mapping[str, TableMeta]
    ) -> CommitResult | None:
        """After an unknown outcome: wait out the old backend's locks, then look up the key."""
        table_ids = sorted(metas[tc.table].table_id for tc in request.tables)
        for _ in self._policy.attempts_iter():
            try:
                with self._store.connection() as conn, translate_errors(), conn.transaction():
                    conn.execute(query("lock_tables"), {"table_ids": table_ids})
                    return _find_key(conn, request.key)
            except CatalogUnavailableError:
                continue
        raise CommitStateUnknown(
            "the catalog connection died while committing and the outcome could not be "
            "looked up; keep the files and call Catalog.resolve_commit(writer_id, batch_id)",
            writer_id=request.key.writer_id,
            batch_id=request.key.batch_id,
        )

    def _exhausted(
        self, request: CommitRequest, error: Exception | None, unknown: bool
    ) -> Exception:
        if unknown:
            return CommitStateUnknown(
                f"commit outcome unknown after retries: {error}",
                writer_id=request.key.writer_id,
                batch_id=request.key.batch_id,
            )
        if isinstance(error, CatalogUnavailableError) and error.kind is UnavailableKind.LOCK_BUSY:
            return CommitConflict(kind=ConflictKind.BUSY, table=request.tables[0].table)
        return CatalogUnavailableError(f"catalog commit failed after retries: {error}")


class _Publication:
    """One attempt at publishing, inside the locked transaction."""

    def __init__(
        self,
        conn: psycopg.Connection[DictRow],
        request: CommitRequest,
        metas: Mapping[str, TableMeta],
        commit_id: uuid.UUID,
    ) -> None:
        self.conn = conn
        self.request = request
        self.metas = metas
        self.commit_id = commit_id

    def run(self) -> CommitResult:
        locks, key, heads = self._send_reads()
        locked, now = self._lock(locks.fetchall())  # one round trip brings all three
        row = key.fetchone()
        previous = CommitResult.model_validate(row["result"]) if row else None
        if previous is not None:
            self._check_same_tables(previous)
            return previous.model_copy(update={"replayed": True})
        committed_at = max([now, *(t.committed_at + _ONE_MICROSECOND for t in locked.values())])
        for tc in self.request.tables:
            if tc.evolve_to is not None:
                self._evolve(tc)
        plans = {
            tc.table: self._plan(
                tc,
                locked[self.metas[tc.table].table_id],
                heads_from_rows(heads[tc.table].fetchall()),
            )
            for tc in self.request.tables
        }
        results = tuple(
            self._apply(tc, plans[tc.table], locked[self.metas[tc.table].table_id], committed_at)
            for tc in self.request.tables
        )
        result = CommitResult(
            commit_id=self.commit_id,
            key=self.request.key,
            committed_at=committed_at,
            tables=results,
        )
        self._record_key(result)
        self._notify(result)
        return result

    def _notify(self, result: CommitResult) -> None:
        landed = [t.table_id for t in result.tables if t.version is not None]
        if landed:
            self.conn.execute(
                query("notify_commit"), {"channel": COMMIT_CHANNEL, "table_ids": landed}
            )

    def _evolve(self, tc: TableCommit) -> None:
        """Publish the commit's schema change; the head lock serialises it with other changes."""
        assert tc.evolve_to is not None
        meta = self.metas[tc.table]
        row = self.conn.execute(query("table_by_id"), {"table_id": meta.table_id}).fetchone()
        assert row is not None
        history = {
            r["schema_id"]: schemas.deserialize(r["arrow_schema"])
            for r in self.conn.execute(query("table_schemas"), {"table_id": meta.table_id})
        }
        current = replace(meta, schemas=history, current_schema_id=row["current_schema_id"])
        try:
            target = plan_schema_change(current, schemas.from_base64(tc.evolve_to))
        except SchemaError as exc:
            raise CommitRejected(str(exc), table=tc.table) from exc
        if target is not None:
            new_id = record_schema(self.conn, meta.table_id, current.current_schema_id, target)
            assert new_id is not None  # we hold the head lock
            history[new_id] = target
            self.metas = {
                **self.metas,
                tc.table: replace(current, schemas=history, current_schema_id=new_id),
            }

    def _check_same_tables(self, previous: CommitResult) -> None:
        """A replay is the same batch only if it went to the same tables (same incarnations)."""
        mine = {self.metas[tc.table].table_id for tc in self.request.tables}
        theirs = {t.table_id for t in previous.tables}
        if mine != theirs:
            key = self.request.key
            raise CommitRejected(
                f"writer {key.writer_id!r} batch {key.batch_id} was already committed to other "
                f"tables ({', '.join(sorted(t.table for t in previous.tables))}); a writer id "
                "must not be reused for different tables or for a recreated table"
            )

    def _send_reads(self) -> _Reads:
        """Queue the head locks, the key lookup and every partition's head, to travel together.

        The reads run after the lock is granted, each on a fresh snapshot (READ COMMITTED), so
        they see the state we build on. Under the lock every committed partition version is at
        or below the table's head, so "latest" needs no bound from the lock's answer.
        """
        table_ids = sorted(self.metas[tc.table].table_id for tc in self.request.tables)
        locks = self.conn.execute(query("lock_tables"), {"table_ids": table_ids})
        key = self.conn.execute(
            query("find_commit_key"),
            {"writer_id": self.request.key.writer_id, "batch_id": self.request.key.batch_id},
        )
        heads = {
            tc.table: send_partition_heads(
                self.conn,
                self.metas[tc.table].table_id,
                [p.partition_desc for p in tc.partitions],
                _LATEST,
            )
            for tc in self.request.tables
        }
        return _Reads(locks, key, heads)

    def _lock(self, rows: Sequence[DictRow]) -> tuple[dict[uuid.UUID, _LockedTable], dt.datetime]:
        locked = {
            r["table_id"]: _LockedTable(
                r["table_id"], r["version"], r["committed_at"], r["dropped_at"] is not None
            )
            for r in rows
        }
        for tc in self.request.tables:
            state = locked.get(self.metas[tc.table].table_id)
            if state is None or state.dropped:
                raise CommitRejected(f"table {tc.table!r} was dropped", table=tc.table)
        now: dt.datetime = rows[0]["now"]
        return locked, now

    def _plan(
        self, tc: TableCommit, table: _LockedTable, heads: Mapping[str, PartitionHead | None]
    ) -> list[_PartitionPlan]:
        meta = self.metas[tc.table]
        if tc.base_version is not None and tc.base_version > table.version:
            raise CommitRejected(
                f"base version {tc.base_version} of {tc.table!r} is newer than its latest "
                f"version {table.version}",
                table=tc.table,
            )
        landed = self._landed(tc, table, heads)
        plans = []
        for part in tc.partitions:
            plan = _PartitionPlan(
                part, landed.get(part.partition_desc, []), heads[part.partition_desc]
            )
            outcome = conflicts.resolve(tc.op, plan.landed, meta.relaxations)
            if outcome.resolution is conflicts.Resolution.FAIL:
                raise _conflict(tc, plan, outcome, table.version)
            if outcome.resolution is not conflicts.Resolution.DISCARD:
                plan.chain = conflicts.new_chain(tc.op, self.commit_id, outcome, plan.landed)
            plans.append(plan)
        self._materialize(tc, meta, [p for p in plans if p.chain is not None])
        return plans

    def _landed(
        self, tc: TableCommit, table: _LockedTable, heads: Mapping[str, PartitionHead | None]
    ) -> dict[str, list[conflicts.Landed]]:
        base = tc.base_version
        if base is None or not any(h and h.table_version > base for h in heads.values()):
            return {}
        rows = self.conn.execute(
            query("landed_since"),
            {"table_id": self.metas[tc.table].table_id, "descs": list(heads), "base": base},
        ).fetchall()
        landed: dict[str, list[conflicts.Landed]] = defaultdict(list)
        for r in rows:
            landed[r["partition_desc"]].append(
                conflicts.Landed(r["version"], CommitOp(r["commit_op"]), tuple(r["commit_ids"]))
            )
        return landed

    def _materialize(
        self, tc: TableCommit, meta: TableMeta, plans: Sequence[_PartitionPlan]
    ) -> None:
        """Turn a landing reset op's deltas into the partition's whole file set.

        A compaction or update starts a new snapshot chain, so its commit row must name every
        file of the partition, not only the ones it rewrote: the live files of its base snapshot,
        less what it deletes, plus what it adds. It may only delete files that base holds.
        """
        if not tc.op.resets_snapshot or not plans:
            return
        base_heads = {p.commit.partition_desc: self._base_head(meta, p) for p in plans}
        snapshots = {
            s.partition_desc: s
            for s in load_snapshots(self.conn, meta.table_id, [h for h in base_heads.values() if h])
        }
        for plan in plans:
            snapshot = snapshots.get(plan.commit.partition_desc)
            live = {f.path: f for f in snapshot.live_files()} if snapshot else {}
            gone = [f.path for f in plan.commit.deleted if f.path not in live]
            if gone:
                raise CommitConflict(
                    kind=ConflictKind.INPUT_FILES_GONE,
                    table=tc.table,
                    partition_desc=plan.commit.partition_desc,
                    expected_version=tc.base_version,
                    actual_version=plan.head.version if plan.head else None,
                )
            for file in plan.commit.deleted:
                del live[file.path]
            kept = [FileOp(action=FileAction.ADD, file=f) for f in live.values()]
            plan.full_state = (*kept, *plan.commit.ops)

    def _base_head(self, meta: TableMeta, plan: _PartitionPlan) -> PartitionHead | None:
        """The partition version the work was planned against: just before what landed since."""
        if not plan.landed:
            return plan.head
        version = plan.landed[0].version - 1
        row = self.conn.execute(
            query("partition_version"),
            {
                "table_id": meta.table_id,
                "partition_desc": plan.commit.partition_desc,
                "version": version,
            },
        ).fetchone()
        if row is None and version >= 1:
            # snapshot expiry removed the base: the work was planned below the table's horizon
            raise CommitConflict(
                kind=ConflictKind.INPUT_FILES_GONE,
                table=str(meta.name),
                partition_desc=plan.commit.partition_desc,
                actual_version=plan.head.version if plan.head else None,
            )
        return head_from_row(row) if row else None

    def _apply(
        self,
        tc: TableCommit,
        plans: Sequence[_PartitionPlan],
        table: _LockedTable,
        committed_at: dt.datetime,
    ) -> TableCommitResult:
        meta = self.metas[tc.table]
        landing = [p for p in plans if p.chain is not None]
        discarded = [p for p in plans if p.chain is None]
        self._record_discarded(meta, discarded)
        if not landing:
            log.info("commit_discarded", table=tc.table, op=tc.op.value, partitions=len(discarded))
            return TableCommitResult(
                table=tc.table, table_id=meta.table_id, version=None, discarded=True
            )
        # Not waited for: we hold the head lock, so the head moves to exactly its version + 1
        # (and the primary key of table_version would refuse a version taken twice).
        self.conn.execute(
            query("advance_head"), {"table_id": meta.table_id, "committed_at": committed_at}
        )
        version = table.version + 1
        partition_versions = self._insert_versions(tc, meta, landing, version, committed_at)
        self._insert_table_version(tc, meta, (landing, discarded), version, committed_at)
        return TableCommitResult(
            table=tc.table,
            table_id=meta.table_id,
            version=version,
            partition_versions=partition_versions,
        )

    def _insert_versions(
        self,
        tc: TableCommit,
        meta: TableMeta,
        landing: Sequence[_PartitionPlan],
        table_version: int,
        committed_at: dt.datetime,
    ) -> dict[str, int]:
        rows: list[dict[str, Any]] = []
        for plan in landing:
            assert plan.chain is not None
            version = (plan.head.version if plan.head else 0) + 1
            start = (
                version
                if plan.chain.starts_new_chain or plan.head is None
                else plan.head.snapshot_start
            )
            rows.append(
                {
                    "table_id": meta.table_id,
                    "partition_desc": plan.commit.partition_desc,
                    "version": version,
                    "table_version": table_version,
                    "commit_op": tc.op.value,
                    "snapshot_start": start,
                    "commit_ids": list(plan.chain.commit_ids),
                    "committed_at": committed_at,
                }
            )
        with self.conn.cursor() as cur:
            cur.executemany(query("insert_partition_version"), rows)
            materialized = [
                {
                    "table_id": meta.table_id,
                    "partition_desc": p.commit.partition_desc,
                    "commit_id": self.commit_id,
                    "file_ops": _ops_json(p.full_state),
                }
                for p in landing
                if p.full_state is not None
            ]
            if materialized:
                cur.executemany(query("set_file_ops"), materialized)
        descs = [plan.commit.partition_desc for plan in landing]
        params = {
            "table_id": meta.table_id,
            "descs": descs,
            "commit_id": self.commit_id,
            "table_version": table_version,
        }
        self.conn.execute(query("insert_table_partitions"), params)
        return {r["partition_desc"]: r["version"] for r in rows}

    def _insert_table_version(
        self,
        tc: TableCommit,
        meta: TableMeta,
        plans: tuple[Sequence[_PartitionPlan], Sequence[_PartitionPlan]],
        version: int,
        committed_at: dt.datetime,
    ) -> None:
        landing, discarded = plans
        added = [f for p in landing for f in p.commit.added]
        removed = [f for p in landing for f in p.commit.deleted]
        summary: dict[str, object] = {
            "partitions": len(landing),
            "discarded_partitions": len(discarded),
            "files_added": len(added),
            "files_removed": len(removed),
            "rows_added": sum(f.row_count for f in added),
            "rows_removed": sum(f.row_count for f in removed),
            "bytes_added": sum(f.size_bytes for f in added),
            "base_version": tc.base_version,
        }
        watermark = self.request.source_watermark
        if watermark is not None:
            point = watermark.tables.get(tc.table, watermark.batch)
            summary["source_watermark"] = {
                **point.model_dump(mode="json"),
                "exceptions": list(watermark.exceptions),
            }
        self.conn.execute(
            query("insert_table_version"),
            {
                "table_id": meta.table_id,
                "version": version,
                "commit_id": self.commit_id,
                "commit_op": tc.op.value,
                "committed_at": committed_at,
                "writer_id": self.request.key.writer_id,
                "batch_id": self.request.key.batch_id,
                "summary": Jsonb(summary),
            },
        )

    def _record_discarded(self, meta: TableMeta, discarded: Sequence[_PartitionPlan]) -> None:
        """A discarded commit's new files are never referenced: queue them for cleanup."""
        paths = [f.path for p in discarded for f in p.commit.added]
        if discarded:  # the cleanup rows below replace the prepared ones
            self.conn.execute(
                query("forget_partitions"),
                {
                    "table_id": meta.table_id,
                    "commit_id": self.commit_id,
                    "descs": [p.commit.partition_desc for p in discarded],
                },
            )
        if paths:
            self.conn.execute(
                query("insert_cleanup_files"),
                {
                    "table_id": meta.table_id,
                    "paths": paths,
                    "commit_id": self.commit_id,
                    "reason": "discarded by conflict resolution",
                },
            )

    def _record_key(self, result: CommitResult) -> None:
        key = self.request.key
        params = {
            "writer_id": key.writer_id,
            "batch_id": key.batch_id,
            "commit_id": self.commit_id,
            "committed_at": result.committed_at,
            "result": Jsonb(result.model_dump(mode="json")),
            "source_offsets": Jsonb(self.request.source_offsets)
            if self.request.source_offsets is not None
            else None,
            "table_ids": sorted(t.table_id for t in result.tables),
            "source_watermark": _jsonb_or_none(self.request.source_watermark),
            "job_state": Jsonb(self.request.job_state)
            if self.request.job_state is not None
            else None,
        }
        self.conn.execute(query("insert_commit_key"), params)
        if not self.request.record_progress or (
            self.request.progress_key is None and key.is_anonymous
        ):
            return  # nobody can ask for the progress of a one-off writer: keep no row for it
        progress = {**params, "writer_id": self.request.progress_key or key.writer_id}
        self.conn.execute(query("upsert_writer_progress"), progress)


def _jsonb_or_none(model: BaseModel | None) -> Jsonb | None:
    return None if model is None else Jsonb(model.model_dump(mode="json"))


def _log_conflict(request: CommitRequest, exc: CommitConflict) -> None:
    """One line per lost commit: who lost, against which version, to what."""
    log.info(
        "commit_conflict",
        kind=exc.kind.value,
        table=exc.table,
        partition=exc.partition_desc,
        writer_id=request.key.writer_id,
        batch_id=request.key.batch_id,
        expected_version=exc.expected_version,
        actual_version=exc.actual_version,
        winning_op=exc.winning_op,
    )


def _find_key(conn: psycopg.Connection[DictRow], key: IdempotencyKey) -> CommitResult | None:
    row = conn.execute(
        query("find_commit_key"), {"writer_id": key.writer_id, "batch_id": key.batch_id}
    ).fetchone()
    return CommitResult.model_validate(row["result"]) if row else None


def _ops_json(ops: PartitionCommit | Sequence[FileOp]) -> str:
    items = ops.ops if isinstance(ops, PartitionCommit) else ops
    return "[" + ",".join(op.model_dump_json() for op in items) + "]"


def _conflict(
    tc: TableCommit, plan: _PartitionPlan, outcome: conflicts.Outcome, actual: int
) -> CommitConflict:
    winner = outcome.winner
    winning_commit = None
    if winner is not None and winner.commit_ids:
        winning_commit = (
            winner.commit_ids[0] if winner.op.resets_snapshot else winner.commit_ids[-1]
        )
    return CommitConflict(
        kind=ConflictKind.CONCURRENT_WRITE,
        table=tc.table,
        partition_desc=plan.commit.partition_desc,
        expected_version=tc.base_version,
        actual_version=actual,
        winning_commit=winning_commit,
        winning_op=winner.op.value if winner else None,
    )


def validate_request(request: CommitRequest, metas: Mapping[str, TableMeta]) -> None:
    """Reject what can never land, before touching the database."""
    names = [tc.table for tc in request.tables]
    if len(names) != len(set(names)):
        raise CommitRejected("a commit names the same table twice")
    for tc in request.tables:
        meta = metas[tc.table]
        _validate_table_commit(tc, meta)


def _validate_table_commit(tc: TableCommit, meta: TableMeta) -> None:
    if tc.op.resets_snapshot and tc.base_version is None:
        raise CommitRejected(
            f"a {tc.op} commit needs the base version it was planned against", table=tc.table
        )
    if tc.op is CommitOp.MERGE and not meta.is_cdc:
        raise CommitRejected(
            f"{tc.table!r} has no primary key: merge commits need one", table=tc.table
        )
    if not tc.partitions:
        raise CommitRejected("a table commit must touch at least one partition", table=tc.table)
    for part in tc.partitions:
        try:
            meta.spec.validate(part.partition_desc)
        except ValueError as exc:
            raise CommitRejected(str(exc), table=tc.table) from exc
        if tc.op in (CommitOp.APPEND, CommitOp.MERGE) and part.deleted:
            raise CommitRejected(f"{tc.op} commits only add files", table=tc.table)
        for file in part.added:
            if file.schema_id not in meta.schemas:
                raise CommitRejected(
                    f"file {file.path!r} names schema id {file.schema_id}, which "
                    f"{tc.table!r} does not have",
                    table=tc.table,
                )
