"""``lakestream compactor status``: per table, what is owed and what the queue is doing.

Read from the catalog (each table's latest snapshot, index lookups only) and the queue; it needs
no running service, so it answers the same from any host.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from catalog import Catalog, CatalogError
from compaction.amplification import WriteAmplification, write_amplification
from compaction.backlog import backlog
from compaction.coordinator import matches
from compaction.errors import CompactionError
from compaction.maintenance import ScheduleStatus, schedule_status
from compaction.policy import CompactionPolicy
from compaction.queue import LiveTask, TaskQueue, TaskResult


@dataclass(frozen=True)
class TableStatus:
    table: str
    kind: str
    version: int
    files: int = 0
    small_files: int = 0
    max_runs_per_bucket: int = 0
    queued: int = 0
    running: list[LiveTask] = field(default_factory=list)
    last_results: list[TaskResult] = field(default_factory=list)
    error: str | None = None
    """Why the figures are missing (e.g. a compaction property with a bad value)."""
    maintenance: ScheduleStatus | None = None
    """The table's maintenance schedule and last run (None: the service has not served it)."""
    amplification: WriteAmplification | None = None
    """Compaction bytes written and ingested bytes over the last hour of versions (D8)."""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["maintenance"] = self.maintenance.to_json() if self.maintenance else None
        amp = self.amplification
        out["amplification"] = None
        if amp is not None:
            out["amplification"] = {**asdict(amp), "ratio": amp.ratio}
        out["running"] = [
            {
                "task_id": str(t.task_id),
                "partition": t.partition_desc,
                "worker": t.worker_id,
                "attempts": t.attempts,
                "running_s": t.running_s,
                "lease_left_s": t.lease_left_s,
            }
            for t in self.running
        ]
        out["last_results"] = [
            {
                "task_id": str(r.task_id),
                "partition": r.partition_desc,
                "kind": r.kind,
                "outcome": r.outcome,
                "finished_at": r.finished_at.isoformat(),
                "duration_s": r.duration_s,
                "rows_in": r.rows_in,
                "rows_out": r.rows_out,
                "bytes_in": r.bytes_in,
                "bytes_out": r.bytes_out,
                "attempts": r.attempts,
                "lease_expiries": r.lease_expiries,
                "error": r.error,
            }
            for r in self.last_results
        ]
        return out


def collect_status(
    catalog: Catalog, queue: TaskQueue, patterns: Sequence[str], results_per_table: int = 3
) -> list[TableStatus]:
    live: dict[str, list[LiveTask]] = defaultdict(list)
    for task in queue.live():
        live[str(task.table_id)].append(task)
    results: dict[str, list[TaskResult]] = defaultdict(list)
    for result in queue.recent_results(per_table=results_per_table):
        results[str(result.table_id)].append(result)
    found = []
    heads = [h for h in catalog.table_heads() if matches(h.name, patterns)]
    schedules = schedule_status(catalog, [h.table_id for h in heads])
    for head in heads:
        key = str(head.table_id)
        tasks = live.get(key, [])
        common: dict[str, Any] = {
            "table": head.name,
            "version": head.version,
            "queued": sum(t.state == "queued" for t in tasks),
            "running": [t for t in tasks if t.state == "running"],
            "last_results": results.get(key, []),
            "maintenance": schedules.get(head.table_id),
        }
        try:
            table = catalog.load_table(head.name)
            policy = CompactionPolicy.from_properties(table.meta.properties, table=head.name)
            owed = backlog(table.meta, table.plan(version=head.version), policy)
            amplification = write_amplification(table)
        except (CatalogError, CompactionError) as exc:
            found.append(TableStatus(kind="?", error=str(exc), **common))
            continue
        found.append(
            TableStatus(
                kind=table.meta.kind,
                files=owed.files,
                small_files=owed.small_files,
                max_runs_per_bucket=owed.max_runs_per_bucket,
                amplification=amplification,
                **common,
            )
        )
    return found
