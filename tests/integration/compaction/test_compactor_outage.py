"""The compactor across a catalog outage: tasks in flight are neither lost nor done twice, a
lease lost in the outage is taken over cleanly, and an outage longer than the budget stops the
service with one line (exit 1) while a restart finishes the work."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from catalog import (
    Catalog,
    CommitOp,
    CommitRequest,
    CommitResult,
    OutageGuard,
    OutagePolicy,
    RetryPolicy,
    StoreSettings,
    Table,
)
from catalog.meta import TableMeta
from compaction.queue import QueueSettings, TaskQueue
from compaction.task import COMPACTOR_WRITER_PREFIX
from compaction.worker import Worker
from jobs.settings import redact_dsn
from tests.fixtures.compaction import files_on_disk, plan_tasks, rows_at
from tests.fixtures.faultproxy import FaultProxy
from tests.fixtures.jsonlog import events_named
from tests.fixtures.outage import CrashablePostgres
from tests.fixtures.postgres import catalog_connection
from tests.fixtures.waits import wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
EVENTS = pa.schema([("id", pa.int64()), ("region", pa.string())])
SMALL_FILES = {"compaction.min-file-num": "3"}
LEASE = dt.timedelta(seconds=2)


def small_files(catalog: Catalog, name: str, regions: int, appends: int, start: int = 0) -> Table:
    """An append table whose partitions each hold ``appends`` small files."""
    table = (
        catalog.load_table(name)
        if catalog.table_exists(name)
        else catalog.create_table(name, EVENTS, partition_by=["region"], properties=SMALL_FILES)
    )
    for i in range(start, start + appends):
        ids = range(i * 100, i * 100 + 10)
        table.append(pa.table({"id": ids, "region": [f"r{n % regions}" for n in ids]}))
    return table


def compactions_by_task(table: Table) -> Counter[str]:
    history = table.history(limit=10_000)
    return Counter(v.writer_id for v in history if v.op is CommitOp.COMPACTION)


class GatedCatalog(Catalog):
    """The real catalog; its commits wait at a gate (a worker whose rewrite is done)."""

    at_gate: threading.Event
    gate: threading.Event

    def commit(
        self, request: CommitRequest, *, known: Mapping[str, TableMeta] | None = None
    ) -> CommitResult:
        self.at_gate.set()
        self.gate.wait(120)
        return super().commit(request, known=known)


def test_a_lease_lost_in_an_outage_is_taken_over_and_the_task_commits_once(
    outage_pg: CrashablePostgres, tmp_path: Path
):
    """Worker A has rewritten its task and is about to commit when the catalog goes down; A's
    host stays cut off a little longer, so its lease lapses and worker B takes the task over and
    commits it. When A comes back its commit finds the task's key landed: A records nothing and
    deletes its outputs. One compaction commit, the rows unchanged, no stray file."""
    dsn = outage_pg.database()
    warehouse = tmp_path / "warehouse"
    with Catalog.connect(dsn, warehouse=warehouse) as setup:
        table = small_files(setup, "logs.events", regions=1, appends=5)
        before = rows_at(table)
        [task] = TaskQueue(setup.store).enqueue(plan_tasks(table), "test")

    proxy = FaultProxy(outage_pg.port)
    cat_a = GatedCatalog.connect(
        proxy.dsn(dsn.rsplit("/", 1)[1]),
        retry=RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05, deadline=1),
        settings=StoreSettings(pool_size=2, connect_timeout=2),
    )
    cat_a.at_gate, cat_a.gate = threading.Event(), threading.Event()
    guard_a = OutageGuard("catalog of A", OutagePolicy(budget=60, max_delay=0.5))
    worker_a = Worker(
        cat_a, TaskQueue(cat_a.store, QueueSettings(lease=LEASE), guard_a), worker_id="a"
    )
    outcome_a: dict[str, str | None] = {}
    runner = threading.Thread(target=lambda: outcome_a.update(a=worker_a.run_one()))
    runner.start()
    try:
        wait_for(cat_a.at_gate.is_set, "worker A to reach its commit")
        outage_pg.crash()
        proxy.partition()  # A stays cut off after the database is back
        time.sleep(LEASE.total_seconds() + 1)
        outage_pg.recover()

        with Catalog.connect(dsn, warehouse=warehouse) as cat_b:
            worker_b = Worker(
                cat_b, TaskQueue(cat_b.store, QueueSettings(lease=LEASE)), worker_id="b"
            )
            assert worker_b.run_one() == "committed"  # B took the lapsed lease over

            proxy.heal()
            cat_a.gate.set()
            runner.join(120)
            assert outcome_a == {"a": "already-done"}

            table = cat_b.load_table("logs.events")
            assert compactions_by_task(table) == {f"{COMPACTOR_WRITER_PREFIX}{task.task_id}": 1}
            assert rows_at(table) == before
            live = {f.path for f in table.plan().files}
            assert files_on_disk(table) == live | {f.path for f in task.inputs}
            [result] = TaskQueue(cat_b.store).recent_results()
            assert (result.outcome, result.attempts, result.lease_expiries) == ("committed", 2, 1)
            assert guard_a.stats().outages >= 1
    finally:
        cat_a.gate.set()
        proxy.heal()
        runner.join(120)
        cat_a.close()
        proxy.close()


# -- the service, as an operator runs it -------------------------------------------------------


def service(dsn: str, warehouse: Path, log: Path, **env: str) -> subprocess.Popen[bytes]:
    variables = {
        **os.environ,
        "LAKESTREAM_CATALOG_DSN": dsn,
        "LAKESTREAM_WAREHOUSE": str(warehouse),
        "LAKESTREAM_LOG_LEVEL": "INFO",
        "LAKESTREAM_COMPACTOR_WORKERS": "1",
        "LAKESTREAM_COMPACTOR_POLL_SECONDS": "1",
        "LAKESTREAM_COMPACTOR_IDLE_SLEEP_SECONDS": "0.2",
        "LAKESTREAM_COMPACTOR_LEASE_SECONDS": "3",
        **env,
    }
    with log.open("ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "compactor", "run"],
            cwd=ROOT, env=variables, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip


def events(log: Path, name: str) -> list[dict[str, Any]]:
    return events_named(log.read_text(), name)


def settled(dsn: str) -> bool:
    """Every task finished and nothing left to plan (a file count per partition below the
    policy's threshold)."""
    with catalog_connection(dsn) as conn:
        live = conn.execute(
            "SELECT count(*) FROM compaction_task WHERE state IN ('queued', 'running')"
        ).fetchone()
    if live != (0,):
        return False
    with Catalog.connect(dsn) as catalog:
        table = catalog.load_table("logs.events")
        return all(len(p.files) < 3 for p in table.plan().partitions)


@pytest.mark.slow
def test_the_service_rides_out_an_outage_then_stops_after_its_budget_and_a_restart_finishes(
    outage_pg: CrashablePostgres, tmp_path: Path
):
    dsn = outage_pg.database(password="s3cret-pw")
    warehouse = tmp_path / "warehouse"
    log = tmp_path / "service.log"
    with Catalog.connect(dsn, warehouse=warehouse) as setup:
        before = rows_at(small_files(setup, "logs.events", regions=6, appends=8))
    running = service(dsn, warehouse, log, LAKESTREAM_COMPACTOR_OUTAGE_BUDGET="60")
    try:
        wait_for(lambda: events(log, "compaction_task"), "the first task")  # work in flight
        outage_pg.outage(8).wait()
        assert running.poll() is None, log.read_text()[-3000:]
        with Catalog.connect(dsn, warehouse=warehouse) as writer:  # new work after the outage
            before = rows_at(small_files(writer, "logs.events", regions=6, appends=4, start=8))
        wait_for(lambda: settled(dsn), "the service to compact everything")
        running.send_signal(signal.SIGTERM)
        assert running.wait(120) == 0, log.read_text()[-3000:]
    finally:
        if running.poll() is None:
            running.kill()
    assert events(log, "catalog_unavailable") and events(log, "catalog_available")

    # an outage longer than the budget: one line, exit 1
    with Catalog.connect(dsn, warehouse=warehouse) as writer:
        small_files(writer, "logs.events", regions=6, appends=4, start=12)
    log_2 = tmp_path / "service-2.log"
    running = service(dsn, warehouse, log_2, LAKESTREAM_COMPACTOR_OUTAGE_BUDGET="3")
    try:
        wait_for(lambda: events(log_2, "compactor_started"), "the service to start")
        outage_pg.crash()
        assert running.wait(120) == 1, log_2.read_text()[-3000:]
    finally:
        if running.poll() is None:
            running.kill()
        outage_pg.recover()
    [failed] = events(log_2, "compactor_failed")
    assert failed["catalog"] == redact_dsn(dsn) and "password=***" in failed["catalog"]
    assert failed["outage_s"] > 0 and "outage budget is 3 s" in failed["error"]
    text = log_2.read_text()
    assert "s3cret-pw" not in text and "Traceback" not in text, text[-3000:]

    # a restart finishes the work: no task lost or done twice, the rows unchanged
    running = service(dsn, warehouse, tmp_path / "service-3.log")
    try:
        wait_for(lambda: settled(dsn), "the restarted service to compact everything")
        running.send_signal(signal.SIGTERM)
        assert running.wait(120) == 0
    finally:
        if running.poll() is None:
            running.kill()
    with Catalog.connect(dsn) as catalog:
        table = catalog.load_table("logs.events")
        with catalog_connection(dsn) as conn:
            tasks = conn.execute("SELECT task_id, outcome FROM compaction_task").fetchall()
        done = {f"{COMPACTOR_WRITER_PREFIX}{t}" for t, outcome in tasks if outcome == "committed"}
        assert done and compactions_by_task(table) == dict.fromkeys(done, 1)
        assert "failed" not in {outcome for _, outcome in tasks}
        assert sorted(rows_at(table)) == sorted(before + rows_of_last_appends())


def rows_of_last_appends() -> list[tuple[Any, ...]]:
    ids = [n for i in range(12, 16) for n in range(i * 100, i * 100 + 10)]
    return [(n, f"r{n % 6}") for n in ids]
