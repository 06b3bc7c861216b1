"""The compaction work queue: a table of our own in the catalog database.

Why not a queue library such as procrastinate: the one rule the queue exists for - at most one
live task per (table, partition) - is a partial unique index over our own columns, checked in the
same INSERT that enqueues; leases are three columns and two UPDATEs; and the table belongs in the
catalog's migrations and test template database, next to the ``table_info`` rows it references
(a dropped table's tasks go with it). A library would bring its own schema and migrations beside
ours, a job model with no notion of a partition, and an async worker we would have to bend to a
multiprocessing pool.

Every call is one short autocommit statement; nothing holds a transaction while a task runs, so a
worker that dies leaves only a lease that lapses on the database's clock.

Every call goes through the queue's :class:`catalog.OutageGuard`: in a long-running compactor a
catalog outage is waited out within the outage budget (then ``CatalogOutageError``); any other
transient failure is :class:`QueueUnavailable`. Each statement is safe to run again: enqueueing
is refused for a partition that already has a live task, a claim whose answer was lost only
holds a lease that lapses, and renewing, finishing or releasing twice changes nothing.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import psycopg
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from catalog import (
    CatalogOutageError,
    CatalogUnavailableError,
    DataFile,
    NamedQueries,
    OutageGuard,
    PgStore,
)
from compaction.errors import CompactionError
from compaction.task import CompactionKind, CompactionOutcome, CompactionTask

query = NamedQueries("compaction", "sql/queue.sql")
T = TypeVar("T")
Connection = psycopg.Connection[DictRow]
Row = dict[str, Any]

#: Outcome recorded for a task that raised (or whose lease lapsed too often).
FAILED = "failed"
#: Enqueueing notifies this channel, so idle workers claim new work at once.
TASK_CHANNEL = "lakestream_compaction_task"


class QueueUnavailable(CompactionError):
    """The catalog database could not be reached for a queue operation; try again later."""

    def __init__(self, operation: str, cause: BaseException) -> None:
        super().__init__(f"compaction queue {operation} failed: {cause}")
        self.operation = operation


@dataclass(frozen=True)
class QueueSettings:
    lease: dt.timedelta = dt.timedelta(seconds=60)
    """How long a claim holds without a heartbeat; workers renew it every third of it."""
    max_attempts: int = 3
    """Claims of one task; after the last one's lease lapses the task is finished as failed."""
    max_failures: int = 3
    """Failed tasks of a partition at one base version before it waits for a newer version."""
    keep_per_partition: int = 10
    retention: dt.timedelta = dt.timedelta(days=7)


@dataclass(frozen=True)
class Claim:
    """A task held by one worker under a lease."""

    task: CompactionTask
    worker_id: str
    attempt: int
    took_over: bool
    """True when this claim took the task over from a worker whose lease lapsed."""
    previous_worker: str | None

    @property
    def task_id(self) -> uuid.UUID:
        assert self.task.task_id is not None
        return self.task.task_id


@dataclass(frozen=True)
class LiveTask:
    task_id: uuid.UUID
    table: str
    table_id: uuid.UUID
    partition_desc: str
    kind: str
    base_version: int
    state: str
    worker_id: str | None
    attempts: int
    lease_expiries: int
    queued_s: float
    running_s: float | None
    lease_left_s: float | None


@dataclass(frozen=True)
class TaskResult:
    """A finished task's record."""

    task_id: uuid.UUID
    table: str
    table_id: uuid.UUID
    partition_desc: str
    kind: str
    outcome: str
    finished_at: dt.datetime
    attempts: int
    lease_expiries: int
    rows_in: int
    rows_out: int
    bytes_in: int
    bytes_out: int
    duration_s: float
    error: str | None
    version: int | None = None


class TaskQueue:
    def __init__(
        self,
        store: PgStore,
        settings: QueueSettings | None = None,
        guard: OutageGuard | None = None,
    ) -> None:
        self._store = store
        self.settings = settings or QueueSettings()
        self.guard = guard or OutageGuard.fail_fast()
        """Waits out catalog outages (the coordinator and worker use it for their catalog calls
        too, so a process has one outage and one budget)."""

    def enqueue(self, tasks: Sequence[CompactionTask], planned_by: str) -> list[CompactionTask]:
        """Queue tasks; returns those that were queued (with their ``task_id``), skipping any
        whose partition has a live task or whose work a finished task already did."""
        if not tasks:
            return []
        with_ids = [_with_id(t) for t in tasks]
        params = {
            "task_ids": [t.task_id for t in with_ids],
            "table_ids": [t.table_id for t in with_ids],
            "table_names": [t.table for t in with_ids],
            "descs": [t.partition_desc for t in with_ids],
            "kinds": [t.kind.value for t in with_ids],
            "bases": [t.base_version for t in with_ids],
            "specs": [Jsonb(_spec(t)) for t in with_ids],
            "planned_by": planned_by,
            "max_failures": self.settings.max_failures,
        }

        def enqueue(conn: Connection) -> list[Row]:
            rows = conn.execute(query("enqueue"), params).fetchall()
            if rows:
                conn.execute(query("notify_tasks"), {"channel": TASK_CHANNEL})
            return rows

        queued = {r["task_id"] for r in self._run("enqueue", enqueue)}
        return [t for t in with_ids if t.task_id in queued]

    def claim(self, worker_id: str) -> Claim | None:
        """Take the oldest claimable task under a fresh lease, or None if there is none."""
        params = {
            "worker_id": worker_id,
            "lease": self.settings.lease,
            "max_attempts": self.settings.max_attempts,
        }
        row = self._one("claim", params)
        if row is None:
            return None
        return Claim(
            task=_task_from_row(row),
            worker_id=worker_id,
            attempt=row["attempts"],
            took_over=row["took_over"],
            previous_worker=row["previous_worker"],
        )

    def renew(self, claim: Claim) -> bool:
        """Extend the lease; False if it is no longer ours (it lapsed and was taken over)."""
        params = {"task_id": claim.task_id, "worker_id": claim.worker_id}
        return self._one("renew", {**params, "lease": self.settings.lease}) is not None

    def finish(self, claim: Claim, outcome: CompactionOutcome) -> bool:
        """Record what the task did; False if the lease was lost before (nothing recorded)."""
        return self._finish(
            claim,
            outcome=outcome.status.value,
            version=outcome.version,
            outputs=Jsonb([f.model_dump(mode="json") for f in outcome.outputs]),
            rows_in=outcome.rows_in,
            rows_out=outcome.rows_out,
            bytes_in=outcome.bytes_in,
            bytes_out=outcome.bytes_out,
            duration_s=outcome.duration_s,
            error=outcome.detail or None,
        )

    def fail(self, claim: Claim, error: str, duration_s: float) -> bool:
        """Record a task that raised; the coordinator plans the partition again."""
        return self._finish(
            claim,
            outcome=FAILED,
            version=None,
            outputs=None,
            rows_in=claim.task.input_rows,
            rows_out=0,
            bytes_in=claim.task.input_bytes,
            bytes_out=0,
            duration_s=duration_s,
            error=error,
        )

    def release(self, claim: Claim) -> bool:
        """Hand a task back unfinished (a worker stopping), claimable at once by another."""
        params = {"task_id": claim.task_id, "worker_id": claim.worker_id}
        return self._one("release", params) is not None

    def give_up_lapsed(self) -> list[Row]:
        """Finish as failed the tasks whose last allowed attempt's lease lapsed."""
        return self._all("give_up_lapsed", {"max_attempts": self.settings.max_attempts})

    def prune(self) -> int:
        """Delete old finished tasks, keeping the newest few per partition; returns how many."""
        params = {
            "keep_per_partition": self.settings.keep_per_partition,
            "retention": self.settings.retention,
        }
        return len(self._all("prune", params))

    def depth(self) -> dict[str, int]:
        """Live tasks by state (``queued``, ``running``)."""
        rows = self._all("depth", {})
        return {"queued": 0, "running": 0, **{r["state"]: int(r["n"]) for r in rows}}

    def live(self) -> list[LiveTask]:
        return [_live_from_row(r) for r in self._all("live_tasks", {})]

    def finished_since(self, since: dt.datetime) -> list[TaskResult]:
        return [_result_from_row(r) for r in self._all("finished_since", {"since": since})]

    def recent_results(self, per_table: int = 5) -> list[TaskResult]:
        rows = self._all("recent_results", {"per_table": per_table})
        return [_result_from_row(r) for r in rows]

    def now(self) -> dt.datetime:
        """The database clock, which leases and finish times are measured on."""
        row = self._one("now", {})
        assert row is not None
        return row["now"]  # type: ignore[no-any-return]

    def _finish(self, claim: Claim, **fields: Any) -> bool:
        params = {"task_id": claim.task_id, "worker_id": claim.worker_id, **fields}
        return self._one("finish", params) is not None

    def _one(self, name: str, params: Mapping[str, Any]) -> Row | None:
        """The named query's one row (or None)."""
        return self._run(name, lambda conn: conn.execute(query(name), params).fetchone())

    def _all(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        return self._run(name, lambda conn: conn.execute(query(name), params).fetchall())

    def _run(self, operation: str, work: Callable[[Connection], T]) -> T:
        """``work`` on a pooled connection, through the outage guard. An outage outlasting the
        budget raises CatalogOutageError; any other transient failure QueueUnavailable."""

        def attempt() -> T:
            with self._store.connection() as conn:  # translates the driver's errors
                return work(conn)

        try:
            return self.guard.call(f"queue.{operation}", attempt)
        except CatalogOutageError:
            raise
        except CatalogUnavailableError as exc:
            raise QueueUnavailable(operation, exc) from exc


def _with_id(task: CompactionTask) -> CompactionTask:
    return task if task.task_id is not None else replace(task, task_id=uuid.uuid4())


def _spec(task: CompactionTask) -> dict[str, Any]:
    return {
        "inputs": [f.model_dump(mode="json") for f in task.inputs],
        "drop_deletes": task.drop_deletes,
        "target_file_size": task.target_file_size,
    }


def _task_from_row(row: Mapping[str, Any]) -> CompactionTask:
    spec = row["spec"]
    return CompactionTask(
        table=row["table_name"],
        table_id=row["table_id"],
        partition_desc=row["partition_desc"],
        kind=CompactionKind(row["kind"]),
        base_version=row["base_version"],
        inputs=tuple(DataFile.model_validate(f) for f in spec["inputs"]),
        drop_deletes=bool(spec["drop_deletes"]),
        target_file_size=int(spec["target_file_size"]),
        task_id=row["task_id"],
    )


def _seconds(later: dt.datetime | None, earlier: dt.datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return (later - earlier).total_seconds()


def _live_from_row(row: Mapping[str, Any]) -> LiveTask:
    now = row["now"]
    running = row["state"] == "running"
    return LiveTask(
        task_id=row["task_id"],
        table=row["table_name"],
        table_id=row["table_id"],
        partition_desc=row["partition_desc"],
        kind=row["kind"],
        base_version=row["base_version"],
        state=row["state"],
        worker_id=row["worker_id"],
        attempts=row["attempts"],
        lease_expiries=row["lease_expiries"],
        queued_s=_seconds(now, row["enqueued_at"]) or 0.0,
        running_s=_seconds(now, row["started_at"]) if running else None,
        lease_left_s=_seconds(row["leased_until"], now) if running else None,
    )


def _result_from_row(row: Mapping[str, Any]) -> TaskResult:
    return TaskResult(
        task_id=row["task_id"],
        table=row["table_name"],
        table_id=row["table_id"],
        partition_desc=row["partition_desc"],
        kind=row["kind"],
        outcome=row["outcome"],
        finished_at=row["finished_at"],
        attempts=row["attempts"],
        lease_expiries=row["lease_expiries"],
        rows_in=row["rows_in"] or 0,
        rows_out=row["rows_out"] or 0,
        bytes_in=row["bytes_in"] or 0,
        bytes_out=row["bytes_out"] or 0,
        duration_s=row["duration_s"] or 0.0,
        error=row["error"],
        version=row.get("version"),
    )
