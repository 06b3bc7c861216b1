"""The compactor's maintenance loop: scheduled per table, one claim per interval, figures in
the schedule, the metrics and ``lakestream compactor status``."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

from catalog import Catalog
from compaction.maintenance import MaintenanceScheduler, MaintenanceSettings, schedule_status
from compaction.metrics import ServiceMetrics
from compaction.queue import QueueSettings, TaskQueue
from tests.fixtures.compaction import files_on_disk, rows_at
from tests.integration.compaction.test_service_cli import lakestream

pytestmark = pytest.mark.integration
DAY = pa.schema([("id", pa.int64()), ("day", pa.date32())])
AGGRESSIVE = {
    "partition.ttl": "30d",
    "snapshot.retain-last": "2",
    "snapshot.time-retained": "0",
    "vacuum.older-than": "0",
}


def daily(catalog: Catalog, name: str, properties: dict[str, str]):
    table = catalog.create_table(name, DAY, partition_by=["day"], properties=properties)
    today = dt.date.today()
    for i in range(6):
        day = dt.date(2020, 1, 1) if i % 3 == 0 else today
        table.append(pa.table({"id": pa.array([i], pa.int64()), "day": [day]}, schema=DAY))
    return table


def test_a_due_table_gets_ttl_expiry_and_vacuum_once_per_interval(catalog: Catalog):
    table = daily(catalog, "logs.daily", AGGRESSIVE)
    off = daily(catalog, "logs.off", {**AGGRESSIVE, "maintenance.enabled": "false"})
    daily(catalog, "other.unserved", AGGRESSIVE)
    metrics = ServiceMetrics()
    scheduler = MaintenanceScheduler(
        catalog,
        TaskQueue(catalog.store, QueueSettings()),
        ["logs.*"],
        MaintenanceSettings(interval=dt.timedelta(hours=1)),
        on_run=lambda run: metrics.observe_maintenance(run.figures()),
    )
    # first runs are spread over the interval: one table now, the other half an hour on
    first = scheduler.run_due()
    smallest = min([table, off], key=lambda t: t.meta.table_id)
    assert [r.table for r in first] == [smallest.name]
    catalog.store.fetch_all(  # half an hour passes
        "UPDATE maintenance_schedule SET next_at = next_at - interval '31 minutes' WHERE runs = 0 "
        "RETURNING 1",
        {},
    )
    runs = {r.table: r for r in first + scheduler.run_due()}
    assert sorted(runs) == ["logs.daily", "logs.off"]
    assert runs["logs.off"].skipped == "maintenance.enabled=false"
    assert off.current_version() == 6
    run = runs["logs.daily"]
    assert not run.errors, run.errors
    assert run.ttl is not None and run.ttl.partitions_dropped == 1
    assert run.expiry is not None and run.expiry.horizon == table.current_version() - 1
    assert run.vacuum is not None and run.vacuum.deleted == 0  # still held by a kept version
    assert {r[0] for r in rows_at(table)} == {1, 2, 4, 5}
    assert scheduler.run_due() == []  # not due again within the interval

    status = schedule_status(catalog, [table.meta.table_id])[table.meta.table_id]
    assert status.runs == 1 and status.last_report is not None
    assert status.last_report["ttl_partitions_dropped"] == 1
    assert status.next_at > dt.datetime.now(dt.UTC) + dt.timedelta(minutes=59)
    text = metrics.exposition().decode()
    assert 'lakestream_compactor_maintenance_runs_total{outcome="ok"} 1.0' in text
    assert 'lakestream_compactor_maintenance_runs_total{outcome="skipped"} 1.0' in text
    assert 'lakestream_compactor_maintenance_total{what="partitions_dropped"} 1.0' in text


def test_compactor_run_once_does_maintenance_and_status_shows_it(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, monkeypatch
):
    table = daily(catalog, "logs.daily", {**AGGRESSIVE, "snapshot.retain-last": "1"})
    before = len(files_on_disk(table))
    monkeypatch.setenv("LAKESTREAM_COMPACTOR_MAINTENANCE_INTERVAL_SECONDS", "3600")
    result = lakestream("compactor", "run", "--once", "--workers", "0",
                        dsn=catalog_dsn, warehouse=warehouse)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(files_on_disk(table)) == before - 2  # TTL dropped, expiry handed over, vacuum
    assert {r[0] for r in rows_at(table)} == {1, 2, 4, 5}  # TTL ran

    status = lakestream("compactor", "status", dsn=catalog_dsn, warehouse=warehouse)
    assert status.returncode == 0, status.stderr
    assert "maintenance: last " in status.stdout and "dropped 1 partition(s)" in status.stdout
    as_json = lakestream("compactor", "status", "--json", dsn=catalog_dsn, warehouse=warehouse)
    [entry] = json.loads(as_json.stdout)
    assert entry["maintenance"]["runs"] == 1
    assert entry["maintenance"]["last_report"]["files_deleted"] >= 1


def test_a_failing_step_is_recorded_and_the_rest_still_runs(catalog: Catalog):
    table = daily(catalog, "logs.daily", {**AGGRESSIVE, "partition.ttl-column": "id"})
    scheduler = MaintenanceScheduler(
        catalog, TaskQueue(catalog.store, QueueSettings()), ["*"], MaintenanceSettings()
    )
    [run] = scheduler.run_due()
    assert "partition.ttl-column" in run.errors["load"]
    status = schedule_status(catalog, [table.meta.table_id])[table.meta.table_id]
    assert status.failures == 1 and "partition.ttl-column" in (status.last_error or "")
