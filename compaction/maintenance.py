"""The compactor's maintenance loop: partition TTL, snapshot expiry and vacuum per table, on a
schedule.

Each served table is due every ``interval`` (default 10 minutes); the first runs of the tables
a coordinator finds are spread evenly over one interval, so tables do not all run at once. The
schedule lives in the catalog (``maintenance_schedule``) and due tables are claimed with
``FOR UPDATE SKIP LOCKED``, so several coordinators share the work and a restart keeps the
rhythm. A run does, in this order:

1. **TTL** (tables with ``partition.ttl``): drop expired partitions in one ``update`` commit;
2. **expiry** with the table's ``snapshot.*`` properties, never past the base version of a
   compaction task still on the queue (its worker reads that version);
3. **Iceberg export** (tables with ``iceberg.metadata: on``; needs the ``iceberg`` extra): the
   versions committed since the last export become Iceberg snapshots, and the snapshots of
   the versions just expired go - before vacuum, so no snapshot names a file it deletes;
4. **vacuum** with ``vacuum.older-than``.

One ``maintenance`` log line per table and run with the figures of each step; the same figures
are stored with the schedule (``lakestream compactor status``) and counted in the metrics. A
failing step is recorded and logged; the other steps still run, and the table is due again
after the interval. Tables with ``maintenance.enabled=false`` are skipped.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from psycopg.types.json import Jsonb

from catalog import Catalog, CatalogError, NamedQueries, Table
from catalog.logs import get_logger
from catalog.maintenance import ExpiryReport, MaintenancePolicy, TtlReport, VacuumReport
from compaction.coordinator import matches
from compaction.queue import TaskQueue

_T = TypeVar("_T")
log = get_logger("lakestream.compaction.maintenance")
query = NamedQueries("compaction", "sql/maintenance.sql")


@dataclass(frozen=True)
class MaintenanceSettings:
    enabled: bool = True
    interval: dt.timedelta = dt.timedelta(minutes=10)
    tables_per_round: int = 5
    """At most this many tables per coordinator round (the round waits for them)."""


@dataclass
class MaintenanceRun:
    """One table's maintenance: what each step did, or why it failed."""

    table: str
    table_id: uuid.UUID
    ttl: TtlReport | None = None
    expiry: ExpiryReport | None = None
    vacuum: VacuumReport | None = None
    iceberg: dict[str, Any] | None = None
    """The Iceberg export's report (``IcebergExport.to_json()``)."""
    errors: dict[str, str] = field(default_factory=dict)
    skipped: str | None = None
    duration_s: float = 0.0

    def figures(self) -> dict[str, Any]:
        """The flat figures of the run: the log line, the status and the metrics use them."""
        out: dict[str, Any] = {"table": self.table, "duration_s": round(self.duration_s, 3)}
        if self.skipped:
            out["skipped"] = self.skipped
        if self.ttl is not None:
            out |= {"ttl_partitions_dropped": self.ttl.partitions_dropped}
            out["ttl_version"] = self.ttl.version
        if self.expiry is not None:
            e = self.expiry
            out |= {
                "versions_expired": e.versions_expired,
                "oldest_version": e.horizon,
                "latest_version": e.latest,
                "partition_rows_removed": e.partition_rows_removed,
                "commit_rows_removed": e.commit_rows_removed,
                "keys_removed": e.keys_removed,
                "files_to_cleanup": e.files_to_cleanup,
            }
        if self.iceberg is not None:
            i = self.iceberg
            out |= {
                "iceberg_version": i["version"],
                "iceberg_lag_versions": i["lag_versions"],
                "iceberg_snapshots_added": len(i["exported"]),
            }
        if self.vacuum is not None:
            v = self.vacuum
            out |= {"files_deleted": v.deleted, "bytes_deleted": v.bytes_deleted}
            out["orphans"] = v.orphans
        if self.errors:
            out["errors"] = dict(self.errors)
        return out


class MaintenanceScheduler:
    def __init__(
        self,
        catalog: Catalog,
        queue: TaskQueue,
        patterns: Sequence[str],
        settings: MaintenanceSettings | None = None,
        *,
        on_run: Callable[[MaintenanceRun], None] | None = None,
    ) -> None:
        self.catalog = catalog
        self.queue = queue
        self.patterns = list(patterns)
        self.settings = settings or MaintenanceSettings()
        self._on_run = on_run

    def run_due(self) -> list[MaintenanceRun]:
        """Run maintenance of the served tables that are due; a catalog outage is logged and
        left for the next round."""
        if not self.settings.enabled:
            return []
        try:
            claimed = self._claim()
        except CatalogError as exc:
            log.error("maintenance_claim_failed", error=str(exc))
            return []
        return [self._run(table_id, name) for table_id, name in claimed]

    def _claim(self) -> list[tuple[uuid.UUID, str]]:
        served = {
            h.table_id: h.name for h in self.catalog.table_heads() if matches(h.name, self.patterns)
        }
        if not served:
            return []
        ids = sorted(served)
        interval_s = self.settings.interval.total_seconds()
        # first runs spread evenly over one interval (tables already scheduled keep theirs)
        offsets = [i / len(ids) * interval_s for i in range(len(ids))]
        with self.catalog.store.connection() as conn, conn.transaction():
            conn.execute(query("schedule_tables"), {"table_ids": ids, "offsets": offsets})
            rows = conn.execute(
                query("claim_due"),
                {
                    "table_ids": ids,
                    "interval_s": interval_s,
                    "limit": self.settings.tables_per_round,
                },
            ).fetchall()
        return [(r["table_id"], served[r["table_id"]]) for r in rows]

    def _run(self, table_id: uuid.UUID, name: str) -> MaintenanceRun:
        started = time.monotonic()
        run = MaintenanceRun(table=name, table_id=table_id)
        try:
            table = self.catalog.load_table(name)
            policy = MaintenancePolicy.of(table.meta)
        except CatalogError as exc:
            run.errors["load"] = str(exc)
            table, policy = None, None
        if table is not None and policy is not None:
            if policy.enabled:
                self._steps(run, table, policy)
            else:
                run.skipped = "maintenance.enabled=false"
        run.duration_s = time.monotonic() - started
        self._record(run)
        return run

    def _steps(self, run: MaintenanceRun, table: Table, policy: MaintenancePolicy) -> None:
        if policy.partition_ttl is not None:
            run.ttl = _step(run, "ttl", table.drop_expired_partitions)
        keep = min(
            (t.base_version for t in self.queue.live() if t.table_id == run.table_id),
            default=None,
        )
        run.expiry = _step(run, "expiry", lambda: table.expire_versions(keep=keep))
        if table.meta.publishes_iceberg:
            run.iceberg = _step(run, "iceberg", lambda: table.export_iceberg().to_json())
        run.vacuum = _step(run, "vacuum", table.vacuum)

    def _record(self, run: MaintenanceRun) -> None:
        figures = run.figures()
        if run.errors:
            log.error("maintenance", **figures)
        else:
            log.info("maintenance", **figures)
        try:
            with self.catalog.store.connection() as conn:
                conn.execute(
                    query("record_run"),
                    {
                        "table_id": run.table_id,
                        "failed": 1 if run.errors else 0,
                        "report": Jsonb(figures),
                        "error": "; ".join(f"{k}: {v}" for k, v in run.errors.items()) or None,
                    },
                )
        except Exception as exc:  # the run happened; only its record is lost
            log.warning("maintenance_record_failed", table=run.table, error=str(exc))
        if self._on_run is not None:
            self._on_run(run)


def _step(run: MaintenanceRun, name: str, action: Callable[[], _T]) -> _T | None:
    try:
        return action()
    except Exception as exc:  # recorded and logged: maintenance never stops the compactor
        run.errors[name] = f"{type(exc).__name__}: {exc}"
        return None


@dataclass(frozen=True)
class ScheduleStatus:
    """A table's maintenance as ``lakestream compactor status`` shows it."""

    next_at: dt.datetime
    runs: int
    failures: int
    last_finished_at: dt.datetime | None
    last_report: dict[str, Any] | None
    last_error: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "next_at": self.next_at.isoformat(),
            "runs": self.runs,
            "failures": self.failures,
            "last_finished_at": self.last_finished_at.isoformat()
            if self.last_finished_at
            else None,
            "last_report": self.last_report,
            "last_error": self.last_error,
        }


def schedule_status(
    catalog: Catalog, table_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, ScheduleStatus]:
    rows = catalog.store.fetch_all(query("schedule_status"), {"table_ids": list(table_ids)})
    return {
        r["table_id"]: ScheduleStatus(
            next_at=r["next_at"],
            runs=r["runs"],
            failures=r["failures"],
            last_finished_at=r["last_finished_at"],
            last_report=r["last_report"],
            last_error=r["last_error"],
        )
        for r in rows
    }
