"""The commit protocol: prepare, decide, publish in one statement, resolve conflicts, retry.

A commit happens in two transactions, after the data files are written:

1. **prepare** - insert the commit's file ops into ``data_commit_info``. Nothing is visible to
   readers yet, but a writer that dies from here on leaves rows that name its files (rows whose
   commit id never got a ``commit_key`` row), so maintenance can find them. (Decided without
   locks, the prepare shares the first round trip of the publish and commits before the
   publishing statement is sent.)
2. **publish** - read each touched table's head, the idempotency key and every touched
   partition's head (one round trip, no locks), decide client-side what landed since the
   commit's base version and how the conflict matrix resolves it, then send the decision to the
   ``publish_commit`` SQL function (migration 0009) as one statement. The function locks the
   ``table_head`` rows (in table-id order, so multi-table commits never deadlock), checks that
   what the decision rests on still holds - the tables are not dropped, the key is unused, a
   reset op's partition is where it was read, and nothing the decision would have had to refuse
   landed since - then inserts the partition versions, advances the heads and records the key and
   the writer's progress. All of it commits atomically, across partitions and across tables.

The locks are held only inside that one server-side statement: no client round trip happens
while another writer waits, which is what lets concurrent writers on distinct partitions of the
same tables scale. If the function finds the decision stale it raises SQLSTATE ``LS001`` and
changes nothing; the commit then decides again *under* the locks, in a transaction that takes
them first (``SELECT ... FOR UPDATE``; under READ COMMITTED every later statement takes a fresh
snapshot, so what it reads is exactly the state it builds on) and publishes through the same
function. Schema changes always take that locked path, and so does a reset op (compaction,
update) that finds something landed since its base: snapshot expiry rewrites the chains such a
decision builds on in place, which the function could not detect (see _Publication._landed).
The primary key ``(table_id, partition_desc, version)`` remains a backstop: a client that
skipped both could not publish the same version twice.

With the matrix's "retry" case (append after append) done as a rebase onto what landed,
concurrent appends never fail and never lose a commit. The retry loop around the whole protocol
is for what the locks cannot prevent: lock timeouts, dropped connections, database restarts.

A connection that dies after the publishing statement was sent leaves the outcome unknown. The
key decides it: on a new connection we first end the old backend if it is still running (it may
not even have taken the locks yet, and would otherwise publish after we looked), take the same
head locks (waiting out its commit) and look the key up. Found - it landed. Absent - it did not,
and we try again.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, LiteralString, NamedTuple

import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from catalog import conflicts, schemas
from catalog.errors import (
    CatalogUnavailableError,
    CommitConflict,
    CommitRejected,
    CommitStateUnknown,
    ConflictKind,
    SchemaError,
    UnavailableKind,
    WatermarkRegressed,
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
from catalog.store import PgStore, pipelined_transaction, translate_errors

log = get_logger("lakestream.catalog.commit")

#: Every publish notifies this channel with the id of each table it gave a new version
#: (``LISTEN lakestream_commit``); the compactor's coordinator wakes on it.
COMMIT_CHANNEL = "lakestream_commit"
_END_BACKEND_MS = 10_000
#: "The latest" as a table-version bound (see _Publication._send_reads).
_LATEST = 2**62


#: A placeholder for the commit time in the result sent to publish_commit, which fills it in.
_FILLED_IN = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: SQLSTATE publish_commit raises when the decision it was sent no longer holds.
_STALE = "LS001"
#: SQLSTATE of a progress row whose source watermark would move back (migration 0010).
_WATERMARK_BACK = "LS002"


class _CommitSent(Exception):
    """The connection failed after the publishing statement was sent: the outcome is unknown.

    ``backend_pid`` ran it; it was connected before ``since`` (the server's clock)."""

    def __init__(self, cause: Exception, backend_pid: int, since: dt.datetime | None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.backend_pid = backend_pid
        self.since = since


class _Stale(Exception):
    """A decision made without the locks no longer holds: decide again under them."""


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
    """What a publication reads (under the locks or not), queued to arrive in one round trip."""

    locks: psycopg.Cursor[DictRow]
    key: psycopg.Cursor[DictRow]
    heads: dict[str, psycopg.Cursor[DictRow]]


@dataclass(frozen=True)
class _TableHead:
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
                found = self._resolve_after_failure(request, metas, exc)
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
        """Prepare, then publish: on one checkout (and pool check). Decided without locks, the
        prepare travels with the reads (see _Publication.run); under them, it commits first."""
        with self._store.connection() as conn:
            if not self._decided_under_locks(request):
                try:
                    return self._attempt(
                        _Publication(conn, request, metas, commit_id, locked=False)
                    )
                except _Stale:
                    pass  # prepared: the rows committed with the reads
            else:
                self._prepare(conn, request, metas, commit_id)
            return self._attempt(_Publication(conn, request, metas, commit_id, locked=True))

    def _decided_under_locks(self, request: CommitRequest) -> bool:
        """Whether a commit must decide under the head locks from the start: a schema change,
        which the lock serialises with other schema changes.

        A reset op (compaction, update) tries without them, and goes under them when something
        landed since its base (see _Publication._landed): only then would its decision rest on
        rows that snapshot expiry rewrites in place without a new version.
        """
        return any(tc.evolve_to is not None for tc in request.tables)

    # -- prepare -----------------------------------------------------------------------------

    def _prepare(
        self,
        conn: psycopg.Connection[DictRow],
        request: CommitRequest,
        metas: Mapping[str, TableMeta],
        commit_id: uuid.UUID,
    ) -> None:
        with translate_errors(), pipelined_transaction(conn):  # one round trip
            _send_prepare(conn, request, metas, commit_id)

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

    def _attempt(self, publication: _Publication) -> CommitResult:
        conn = publication.conn
        backend_pid = conn.info.backend_pid
        try:
            with _regression_rejected(publication.request.key.writer_id), translate_errors():
                if publication.locked:
                    with pipelined_transaction(conn):
                        outcome = publication.run()
                else:
                    with _stale_as(_Stale), conn.pipeline() as pipeline:
                        outcome = publication.run(pipeline)
                return outcome()
        except CatalogUnavailableError as exc:
            if publication.sent and exc.kind is not UnavailableKind.LOCK_BUSY:
                raise _CommitSent(exc, backend_pid, publication.now) from exc
            raise

    def _resolve_after_failure(
        self, request: CommitRequest, metas: Mapping[str, TableMeta], sent: _CommitSent
    ) -> CommitResult | None:
        """After an unknown outcome: end the old backend (it committed or it did not; it may
        not have taken the locks yet), wait out its locks, then look up the key."""
        table_ids = sorted(metas[tc.table].table_id for tc in request.tables)
        for _ in self._policy.attempts_iter():
            try:
                with self._store.connection() as conn, translate_errors():
                    _end_backend(conn, sent)
                    with conn.transaction():
                        conn.execute(_table_heads_sql(lock=True), {"table_ids": table_ids})
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


def _send_prepare(
    conn: psycopg.Connection[DictRow],
    request: CommitRequest,
    metas: Mapping[str, TableMeta],
    commit_id: uuid.UUID,
) -> None:
    """Queue the commit's rows in ``data_commit_info`` (idempotent: a retry with the same
    commit id inserts nothing twice)."""
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


class _Publication:
    """One attempt at publishing: read, decide, then one ``publish_commit`` call writes it all.

    ``locked``: the reads take the tables' head locks (inside a transaction), so the decision
    cannot go stale. Otherwise they take none, and ``publish_commit`` checks under the locks
    that what the decision rests on still holds (raising LS001, "stale", if not).
    """

    def __init__(
        self,
        conn: psycopg.Connection[DictRow],
        request: CommitRequest,
        metas: Mapping[str, TableMeta],
        commit_id: uuid.UUID,
        *,
        locked: bool,
    ) -> None:
        self.conn = conn
        self.request = request
        self.metas = metas
        self.commit_id = commit_id
        self.locked = locked
        self.sent = False
        """True once the publishing statement is queued: from then the outcome may be unknown."""
        self.now: dt.datetime | None = None
        """The server's clock when the reads ran."""

    def run(self, autocommit: psycopg.Pipeline | None = None) -> Callable[[], CommitResult]:
        """Queue the work; the returned call gives the result once the connection synced.

        Unlocked (``autocommit``: the pipeline of a connection outside any transaction), the
        commit's prepare rows are queued first and travel with the reads; the sync that brings
        the reads' answers ends their implicit transaction, so the prepare commits before the
        publishing statement is sent, which then commits by itself. A prepare without a round
        trip of its own.
        """
        if autocommit is not None:
            _send_prepare(self.conn, self.request, self.metas, self.commit_id)
        locks, key, heads = self._send_reads()
        if autocommit is not None:
            autocommit.sync()
        tables = self._tables(locks.fetchall())  # one round trip brings all three
        row = key.fetchone()
        if row is not None:
            previous = CommitResult.model_validate(row["result"])
            self._check_same_tables(previous)
            # our own earlier attempt (its answer was lost) is not a replay
            replayed = previous.commit_id != self.commit_id
            return lambda: previous.model_copy(update={"replayed": replayed})
        for tc in self.request.tables:
            if tc.evolve_to is not None:
                self._evolve(tc)
        plans = [
            (tc, self._plan(tc, tables[tc.table], heads_from_rows(heads[tc.table].fetchall())))
            for tc in self.request.tables
        ]
        self.sent = True
        published = self.conn.execute(
            query("publish_commit"), {"p": Jsonb(self._decision(plans))}, prepare=False
        )
        return lambda: _published_result(published)

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
        """Queue the table heads (locked or not), the key lookup and every partition's head, to
        travel together.

        Locked, the reads run after the lock is granted, each on a fresh snapshot (READ
        COMMITTED), so they see the state we build on. "Latest" needs no bound from the heads'
        answer: every committed partition version is at or below its table's head.
        """
        table_ids = sorted(self.metas[tc.table].table_id for tc in self.request.tables)
        locks = self.conn.execute(_table_heads_sql(lock=self.locked), {"table_ids": table_ids})
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

    def _tables(self, rows: Sequence[DictRow]) -> dict[str, _TableHead]:
        found = {
            r["table_id"]: _TableHead(
                r["table_id"], r["version"], r["committed_at"], r["dropped_at"] is not None
            )
            for r in rows
        }
        tables = {}
        for tc in self.request.tables:
            state = found.get(self.metas[tc.table].table_id)
            if state is None or state.dropped:
                raise CommitRejected(f"table {tc.table!r} was dropped", table=tc.table)
            tables[tc.table] = state
        self.now = rows[0]["now"]
        return tables

    def _plan(
        self, tc: TableCommit, table: _TableHead, heads: Mapping[str, PartitionHead | None]
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
        self, tc: TableCommit, table: _TableHead, heads: Mapping[str, PartitionHead | None]
    ) -> dict[str, list[conflicts.Landed]]:
        """What landed on each partition since the commit's base version.

        A reset op that finds something landed decides under the locks (``_Stale`` when it
        read without them): its decision would rest on the base snapshot below the head and,
        for a reorder, on the commit ids of what landed - rows that snapshot expiry rewrites in
        place, under the head lock, without a new version ``publish_commit`` could check. With
        nothing landed it rests on the head alone: the head's live files, which expiry never
        changes (a restarted chain names the same files), read in one statement, and the
        function's check that the head is still the partition's latest (``expect``).
        """
        base = tc.base_version
        if base is None or not any(h and h.table_version > base for h in heads.values()):
            return {}
        if tc.op.resets_snapshot and not self.locked:
            raise _Stale(f"{tc.table!r} moved since the base of a {tc.op.value}")
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

    def _decision(
        self, plans: Sequence[tuple[TableCommit, Sequence[_PartitionPlan]]]
    ) -> dict[str, Any]:
        """What ``publish_commit`` writes (see migration 0009 for the form)."""
        key = self.request.key
        template = CommitResult(
            commit_id=self.commit_id,
            key=key,
            committed_at=_FILLED_IN,
            tables=tuple(
                TableCommitResult(
                    table=tc.table,
                    table_id=self.metas[tc.table].table_id,
                    version=None,
                    discarded=all(p.chain is None for p in tc_plans),
                )
                for tc, tc_plans in plans
            ),
        )
        return {
            "commit_id": str(self.commit_id),
            "writer_id": key.writer_id,
            "batch_id": key.batch_id,
            "channel": COMMIT_CHANNEL,
            "result": template.model_dump(mode="json"),
            "progress": self._progress(),
            "tables": [self._table_decision(tc, tc_plans) for tc, tc_plans in plans],
        }

    def _table_decision(self, tc: TableCommit, plans: Sequence[_PartitionPlan]) -> dict[str, Any]:
        landing = [p for p in plans if p.chain is not None]
        discarded = [p for p in plans if p.chain is None]
        if not landing:
            log.info("commit_discarded", table=tc.table, op=tc.op.value, partitions=len(discarded))
        return {
            "table_id": str(self.metas[tc.table].table_id),
            "commit_op": tc.op.value,
            "summary": self._summary(tc, landing, discarded),
            "discarded": [p.commit.partition_desc for p in discarded],
            "cleanup": list(dict.fromkeys(x for p in discarded for x in _outputs(p.commit))),
            "landing": [self._landing(tc, p) for p in landing],
        }

    def _landing(self, tc: TableCommit, plan: _PartitionPlan) -> dict[str, Any]:
        """How ``publish_commit`` checks that this partition's decision still holds.

        A reset op's file set was built from the partition's head: that head must still be the
        latest. An append or merge lands on whatever landed meanwhile (the matrix rebases it),
        unless an op it cannot rebase on landed after its base version.
        """
        assert plan.chain is not None
        entry: dict[str, Any] = {
            "desc": plan.commit.partition_desc,
            "commit_ids": [str(c) for c in plan.chain.commit_ids],
            "new_chain": plan.chain.starts_new_chain,
        }
        if tc.op.resets_snapshot:
            entry["expect"] = plan.head.version if plan.head else None
        else:
            relax = self.metas[tc.table].relaxations
            entry["base"] = tc.base_version
            entry["forbidden"] = [
                op.value
                for op in CommitOp
                if conflicts.resolve_pair(tc.op, op, relax) is not conflicts.Resolution.REBASE
            ]
        if plan.full_state is not None:
            entry["file_ops"] = _ops_json(plan.full_state)
        return entry

    def _summary(
        self,
        tc: TableCommit,
        landing: Sequence[_PartitionPlan],
        discarded: Sequence[_PartitionPlan],
    ) -> dict[str, object]:
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
            "bytes_written": sum(_bytes_written(p.commit) for p in landing),
            "base_version": tc.base_version,
        }
        watermark = self.request.source_watermark
        if watermark is not None:
            point = watermark.tables.get(tc.table, watermark.batch)
            summary["source_watermark"] = {
                **point.model_dump(mode="json"),
                "exceptions": list(watermark.exceptions),
            }
        return summary

    def _progress(self) -> dict[str, Any] | None:
        """The writer's progress row, or None: nobody can ask for a one-off writer's progress."""
        request, key = self.request, self.request.key
        if not request.record_progress or (request.progress_key is None and key.is_anonymous):
            return None
        watermark = request.source_watermark
        return {
            "writer_id": request.progress_key or key.writer_id,
            "source_offsets": request.source_offsets,
            "source_watermark": None if watermark is None else watermark.model_dump(mode="json"),
            "job_state": request.job_state,
        }


def _outputs(commit: PartitionCommit) -> list[str]:
    """The files a commit wrote: what it adds, less the files it also names as deleted (a
    reset op that names live files again, with new vectors, did not write them)."""
    named = {x for f in commit.deleted for x in f.paths}
    return [x for f in commit.added for x in f.paths if x not in named]


def _bytes_written(commit: PartitionCommit) -> int:
    """Bytes the commit's writer wrote: the data files it adds and does not name as deleted,
    and each vector it adds that the entry did not carry before (its blob: inline bytes, or
    its range of a vector file). ``bytes_added`` counts a file named again (a resolve's
    entries) at its full size; this is the numerator of write amplification (design D8)."""
    before = {f.path: f.vector for f in commit.deleted}
    written = 0
    for file in commit.added:
        if file.path not in before:
            written += file.size_bytes
        vector = file.vector
        if vector is not None and vector != before.get(file.path):
            written += vector.length or len(base64.b64decode(vector.inline or ""))
    return written


def _published_result(cursor: psycopg.Cursor[DictRow]) -> CommitResult:
    row = cursor.fetchone()
    assert row is not None  # publish_commit returns a row or raises
    return CommitResult.model_validate(row["publish_commit"])


def _table_heads_sql(*, lock: bool) -> LiteralString:
    if lock:
        return query("lock_tables")
    return query("commit_table_heads")


@contextlib.contextmanager
def _regression_rejected(writer_id: str) -> Iterator[None]:
    """The progress row's refusal of a watermark that moves back, as :class:`WatermarkRegressed`
    (the transaction rolled back: nothing of the commit landed)."""
    try:
        yield
    except psycopg.Error as exc:
        if exc.sqlstate == _WATERMARK_BACK:
            text = exc.diag.message_primary or str(exc)
            raise WatermarkRegressed(text, writer_id=writer_id) from None
        raise


@contextlib.contextmanager
def _stale_as(error: type[Exception]) -> Iterator[None]:
    """publish_commit's "stale" answer as ``error``; other errors pass."""
    try:
        yield
    except psycopg.Error as exc:
        if exc.sqlstate == _STALE:
            raise error(str(exc)) from exc
        raise


def _end_backend(conn: psycopg.Connection[DictRow], sent: _CommitSent) -> None:
    """End the backend that ran a publication whose answer was lost, and wait until it has.

    A publication decided without locks takes them only in its last statement; when the
    connection dies with that statement in flight, its backend may not have taken them yet, so
    waiting for the locks alone could look the key up before the statement runs. Once the
    backend is gone the statement either committed or never will. ``since`` guards against a
    reused process id. Without the right to end it (another role), the lock wait remains.
    """
    if sent.since is None:
        return
    try:
        row = conn.execute(
            query("end_backend"),
            {"pid": sent.backend_pid, "since": sent.since, "timeout_ms": _END_BACKEND_MS},
        ).fetchone()
    except psycopg.errors.InsufficientPrivilege as exc:
        log.warning("commit_backend_not_ended", pid=sent.backend_pid, error=str(exc))
        return
    if row is not None:  # it was still there: its statement had not finished
        log.warning("commit_backend_ended", pid=sent.backend_pid, ended=row["pg_terminate_backend"])


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
