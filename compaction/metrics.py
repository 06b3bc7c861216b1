"""The compactor's Prometheus metrics and its health (``jobs.httpserve`` serves both).

Task figures come from the queue, not from the worker processes: every round the coordinator
reads the tasks finished since the last one (by its pool or by ``lakestream compactor worker``
processes on other hosts) and counts them here. So one scrape of the service covers the whole
fleet, and the worker processes need no multiprocess metrics directory. (Two coordinators each
count every task; scrape one, or sum by instance knowingly.)

The catalog's availability, as the coordinator's process sees it (its outage guard), is read at
scrape time: seconds since the last successful catalog call, the current outage's length, and
retries by kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from catalog import OutageStats
from compaction.backlog import Backlog
from compaction.queue import TaskResult

_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class ServiceMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.queue_depth = Gauge(
            "lakestream_compactor_queue_depth", "Live tasks on the queue", ["state"], registry=r
        )
        self.small_files = Gauge(
            "lakestream_compactor_small_files",
            "Small-file backlog per table (append: files below the small-file size; "
            "CDC: runs of buckets holding more than one)",
            ["table"],
            registry=r,
        )
        self.max_runs = Gauge(
            "lakestream_compactor_max_runs_per_bucket",
            "Most sorted runs in one bucket of a CDC table",
            ["table"],
            registry=r,
        )
        self.task_duration = Histogram(
            "lakestream_compactor_task_duration_seconds",
            "Duration of finished tasks",
            ["kind"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.bytes = Counter(
            "lakestream_compactor_bytes",
            "Bytes read and written by finished tasks",
            ["direction"],
            registry=r,
        )
        self.bytes_written = Counter(
            "lakestream_compaction_bytes_written",
            "Bytes finished tasks wrote, per table and kind (a resolve writes only deletion "
            "vectors and filled partial runs): the numerator of write amplification, whose "
            "denominator is bytes_added of the table's append and merge versions",
            ["table", "kind"],
            registry=r,
        )
        self.write_amplification = Gauge(
            "lakestream_write_amplification",
            "Bytes compaction wrote / bytes append and merge commits added, over the versions of "
            "the last hour before a table's newest (design D8); absent until something is ingested",
            ["table"],
            registry=r,
        )
        self.rows = Counter(
            "lakestream_compactor_rows",
            "Rows read and written by finished tasks",
            ["direction"],
            registry=r,
        )
        self.outcomes = Counter(
            "lakestream_compactor_task_outcomes",
            "Finished tasks by outcome (committed, discarded, replan, already-done, failed)",
            ["outcome"],
            registry=r,
        )
        self.lease_expiries = Counter(
            "lakestream_compactor_lease_expiries",
            "Leases that lapsed and were taken over (counted when the task finishes)",
            registry=r,
        )
        self.rounds = Counter(
            "lakestream_compactor_rounds", "Coordinator rounds completed", registry=r
        )
        self.tasks_queued = Counter(
            "lakestream_compactor_tasks_queued", "Tasks this coordinator queued", registry=r
        )
        self.workers_alive = Gauge(
            "lakestream_compactor_workers_alive", "Worker processes of this service", registry=r
        )
        self.maintenance_runs = Counter(
            "lakestream_compactor_maintenance_runs",
            "Table maintenance runs (TTL, expiry, vacuum) by outcome (ok, failed, skipped)",
            ["outcome"],
            registry=r,
        )
        self.maintenance_figures = Counter(
            "lakestream_compactor_maintenance",
            "What maintenance removed: versions_expired, partitions_dropped, files_deleted, "
            "bytes_deleted, commit_rows_removed",
            ["what"],
            registry=r,
        )

    def watch_catalog(self, stats: Callable[[], OutageStats]) -> None:
        """Export the catalog's availability from an outage guard's figures (read per scrape)."""
        self.registry.register(_CatalogCollector(stats))

    def observe_finished(self, results: Iterable[TaskResult]) -> None:
        for t in results:
            self.outcomes.labels(t.outcome).inc()
            self.task_duration.labels(t.kind).observe(t.duration_s)
            self.bytes.labels("read").inc(t.bytes_in)
            self.bytes.labels("written").inc(t.bytes_out)
            self.bytes_written.labels(t.table, t.kind).inc(t.bytes_out)
            self.rows.labels("read").inc(t.rows_in)
            self.rows.labels("written").inc(t.rows_out)
            if t.lease_expiries:
                self.lease_expiries.inc(t.lease_expiries)

    def observe_maintenance(self, figures: Mapping[str, Any]) -> None:
        """One table's maintenance run (:meth:`compaction.maintenance.MaintenanceRun.figures`)."""
        outcome = "failed" if figures.get("errors") else "skipped" if "skipped" in figures else "ok"
        self.maintenance_runs.labels(outcome).inc()
        for what, key in (
            ("versions_expired", "versions_expired"),
            ("partitions_dropped", "ttl_partitions_dropped"),
            ("files_deleted", "files_deleted"),
            ("bytes_deleted", "bytes_deleted"),
            ("commit_rows_removed", "commit_rows_removed"),
        ):
            self.maintenance_figures.labels(what).inc(int(figures.get(key) or 0))

    def observe_queue(self, depth: Mapping[str, int]) -> None:
        for state, n in depth.items():
            self.queue_depth.labels(state).set(n)

    def observe_backlog(self, backlogs: Mapping[str, tuple[Backlog, bool]]) -> None:
        """Per served table: its backlog and whether it is a CDC table."""
        self.small_files.clear()
        self.max_runs.clear()
        for table, (found, cdc) in backlogs.items():
            self.small_files.labels(table).set(found.small_files)
            if cdc:
                self.max_runs.labels(table).set(found.max_runs_per_bucket)

    def observe_amplification(self, ratios: Mapping[str, float | None]) -> None:
        """Per served table: its write amplification (None: nothing ingested in the window)."""
        self.write_amplification.clear()
        for table, ratio in ratios.items():
            if ratio is not None:
                self.write_amplification.labels(table).set(ratio)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _CatalogCollector(Collector):
    def __init__(self, stats: Callable[[], OutageStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        found = self._stats()
        since = GaugeMetricFamily(
            "lakestream_compactor_catalog_seconds_since_success",
            "Seconds since the last successful catalog call (NaN before the first)",
        )
        since.add_metric(
            [], float("nan") if found.seconds_since_success is None else found.seconds_since_success
        )
        outage = GaugeMetricFamily(
            "lakestream_compactor_catalog_outage_seconds",
            "How long the current catalog outage has lasted (0 while the catalog answers)",
        )
        outage.add_metric([], found.outage_s or 0.0)
        retries = CounterMetricFamily(
            "lakestream_compactor_catalog_retries",
            "Catalog calls retried during outages, by kind (connection, restarting, ...)",
            labels=["kind"],
        )
        for kind, n in sorted(found.retries.items()):
            retries.add_metric([kind], n)
        outages = CounterMetricFamily(
            "lakestream_compactor_catalog_outages", "Catalog outages ridden out"
        )
        outages.add_metric([], found.outages)
        yield from (since, outage, retries, outages)


@dataclass(frozen=True)
class Health:
    ok: bool
    detail: Mapping[str, Any]
