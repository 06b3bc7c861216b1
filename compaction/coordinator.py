"""The coordinator: from the latest snapshots of the served tables to tasks on the queue.

Stateless across restarts: everything it must not forget lives in the catalog (snapshots) and the
queue (live and finished tasks). What it keeps in memory only saves work or counts rounds:

* the table version it last planned, so a table that got no commit costs nothing but its row in
  the one heads query per round (no snapshot is read, no planner runs);
* per append partition, how many rounds it has waited with too few small files
  (``compaction.force-after-rounds``); a restart starts those counts again, which only delays
  a forced compaction.

A table whose task did not commit (REPLAN, DISCARDED, failed, given up) is planned again in the
next round from its latest snapshot, whatever its version; the queue refuses to queue a partition
twice (one live task each) or to queue work a finished task already did.

Its catalog reads go through the queue's outage guard, like the queue's own statements: a round
that meets a catalog outage waits for the database (within the budget) and carries on where it
was, rather than failing and forgetting which finished tasks it had already read.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from catalog import (
    Catalog,
    CatalogError,
    CatalogOutageError,
    OutageGuard,
    ScanPlan,
    Table,
    TableHead,
    TableMeta,
    TableNotFoundError,
)
from catalog.logs import get_logger
from compaction.amplification import WriteAmplification, write_amplification
from compaction.backlog import Backlog, backlog, waiting_partitions
from compaction.errors import CompactionError
from compaction.planner import plan_table
from compaction.policy import CompactionPolicy
from compaction.queue import TaskQueue, TaskResult
from compaction.task import CompactionTask, OutcomeStatus

log = get_logger("lakestream.compaction.coordinator")

#: Outcomes after which the partition needs no new plan unless the table changes again.
_SETTLED = {OutcomeStatus.COMMITTED.value, OutcomeStatus.ALREADY_DONE.value}
#: Finished tasks are read back from this far before the last one seen: a finish that committed
#: late with an earlier timestamp is still picked up (task ids de-duplicate).
_OVERLAP = dt.timedelta(seconds=30)


def matches(name: str, patterns: Sequence[str]) -> bool:
    """fnmatch of ``namespace.table`` against any of the patterns (names are lower case)."""
    return any(fnmatch.fnmatchcase(name, p.strip().lower()) for p in patterns if p.strip())


@dataclass
class TableState:
    """What the coordinator remembers of one served table."""

    head: TableHead
    meta: TableMeta
    plan: ScanPlan
    policy: CompactionPolicy
    backlog: Backlog
    idle: dict[str, int] = field(default_factory=dict)
    """Waiting append partitions -> rounds waited."""
    amplification: WriteAmplification | None = None
    """Write amplification over the last hour of versions, read when the head moved."""


@dataclass(frozen=True)
class RoundReport:
    tables: int
    planned_tables: int
    tasks_planned: int
    tasks_queued: int
    given_up: int
    pruned: int
    finished: tuple[TaskResult, ...]
    duration_s: float


class Coordinator:
    def __init__(
        self,
        catalog: Catalog,
        queue: TaskQueue,
        *,
        patterns: Sequence[str] = ("*",),
        coordinator_id: str | None = None,
        prune_every_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        guard: OutageGuard | None = None,
    ) -> None:
        self.catalog = catalog
        self.queue = queue
        self.guard = guard or queue.guard
        self.patterns = tuple(patterns)
        self.coordinator_id = coordinator_id or f"coordinator:{uuid.uuid4().hex[:8]}"
        self.tables: dict[uuid.UUID, TableState] = {}
        self._prune_every = prune_every_s
        self._clock = clock
        self._last_prune = clock()
        self._seen_since: dt.datetime | None = None
        self._seen: dict[uuid.UUID, dt.datetime] = {}
        self._bad_policy: dict[uuid.UUID, int] = {}

    def round(self) -> RoundReport:
        """Plan every served table that changed (or whose work did not land); queue the tasks."""
        started = self._clock()
        finished = self._newly_finished()
        given_up = self.queue.give_up_lapsed()
        replan = {r.table_id for r in finished if r.outcome not in _SETTLED}
        replan |= {r["table_id"] for r in given_up}
        heads = [
            h
            for h in self.guard.call("table_heads", self.catalog.table_heads)
            if matches(h.name, self.patterns)
        ]
        for gone in set(self.tables) - {h.table_id for h in heads}:
            del self.tables[gone]  # dropped, recreated or no longer served
        planned_tables = planned = queued = 0
        for head in heads:
            try:
                tasks = self._plan(head, force_replan=head.table_id in replan)
            except CatalogOutageError:
                raise  # the budget is spent: the service stops, no table is skipped silently
            except (CatalogError, CompactionError) as exc:
                log.error("table_planning_failed", table=head.name, error=str(exc))
                continue
            if tasks is None:
                continue
            planned_tables += 1
            planned += len(tasks)
            queued += len(self.queue.enqueue(tasks, self.coordinator_id))
        report = RoundReport(
            tables=len(heads),
            planned_tables=planned_tables,
            tasks_planned=planned,
            tasks_queued=queued,
            given_up=len(given_up),
            pruned=self._maybe_prune(),
            finished=tuple(finished),
            duration_s=self._clock() - started,
        )
        log.info(
            "round",
            coordinator=self.coordinator_id,
            tables=report.tables,
            planned_tables=planned_tables,
            tasks_planned=planned,
            tasks_queued=queued,
            tasks_finished=len(finished),
            given_up=report.given_up,
            pruned=report.pruned,
            duration_ms=round(report.duration_s * 1000, 1),
        )
        return report

    def _plan(self, head: TableHead, *, force_replan: bool) -> list[CompactionTask] | None:
        """Tasks for one table, or None when it cost no planning (nothing changed)."""
        state = self.tables.get(head.table_id)
        if state is not None and state.head.version == head.version and not force_replan:
            return self._tick(state)
        if self._bad_policy.get(head.table_id) == head.version:
            return None  # its properties were refused at this version already (logged once)
        table = self._table(head, state)
        try:
            policy = CompactionPolicy.from_properties(table.meta.properties, table=head.name)
        except CompactionError:
            self._bad_policy[head.table_id] = head.version
            raise
        plan = self.guard.call("plan", lambda: table.plan(version=head.version))
        idle = state.idle if state is not None else {}
        tasks = plan_table(table.meta, plan, policy, idle_rounds=idle)
        waiting = waiting_partitions(table.meta, plan, policy, (t.partition_desc for t in tasks))
        self.tables[head.table_id] = TableState(
            head=head,
            meta=table.meta,
            plan=plan,
            policy=policy,
            backlog=backlog(table.meta, plan, policy),
            idle={pd: idle.get(pd, 0) + 1 for pd in waiting},
            amplification=self.guard.call(
                "write_amplification", lambda: write_amplification(table)
            ),
        )
        return tasks

    def _tick(self, state: TableState) -> list[CompactionTask] | None:
        """An unchanged table: its waiting partitions waited one more round. Only when one of
        them reaches ``force-after-rounds`` does the planner run again, on the kept plan."""
        if not state.idle:
            return None
        state.idle = {pd: n + 1 for pd, n in state.idle.items()}
        if max(state.idle.values()) < state.policy.force_after_rounds:
            return None
        tasks = plan_table(state.meta, state.plan, state.policy, idle_rounds=state.idle)
        planned = {t.partition_desc for t in tasks}
        state.idle = {pd: n for pd, n in state.idle.items() if pd not in planned}
        return tasks

    def _table(self, head: TableHead, state: TableState | None) -> Table:
        if state is not None:
            return Table(self.catalog, state.meta)
        table = self.guard.call("load_table", lambda: self.catalog.load_table(head.name))
        if table.meta.table_id != head.table_id:  # recreated since the heads were read
            raise TableNotFoundError(head.name)
        return table

    def _newly_finished(self) -> list[TaskResult]:
        """Tasks finished since the last round (by any worker on any host)."""
        if self._seen_since is None:
            self._seen_since = self.queue.now()  # history before we started is not ours
            return []
        rows = self.queue.finished_since(self._seen_since - _OVERLAP)
        fresh = [r for r in rows if r.task_id not in self._seen]
        for r in fresh:
            self._seen[r.task_id] = r.finished_at
        if rows:
            self._seen_since = max(self._seen_since, rows[-1].finished_at)
        horizon = self._seen_since - _OVERLAP
        self._seen = {k: v for k, v in self._seen.items() if v >= horizon}
        return fresh

    def _maybe_prune(self) -> int:
        if self._clock() - self._last_prune < self._prune_every:
            return 0
        self._last_prune = self._clock()
        return self.queue.prune()
