"""``lakestream compact``: a backlog of compaction tasks run as Spark tasks (real PostgreSQL,
real files, the session's local[2] Spark), and the command as a user runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql
from pyspark.sql import SparkSession

from catalog import DEFAULT_SCHEMA, Catalog, CommitOp, Table
from compaction.task import COMPACTOR_WRITER_PREFIX
from jobs.compact_engine import TaskResult
from jobs.compact_spark import ExecutorCatalog, spark_engine
from jobs.table_compact import compact_backlog, plan_compaction
from tests.fixtures.cli import lakestream
from tests.fixtures.compaction import files_on_disk, rows_at
from tests.fixtures.procs import processes
from tests.fixtures.waits import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

EVENTS = pa.schema([("id", pa.int64()), ("region", pa.string())])
REGIONS = ("eu", "us", "ap")


def events_table(catalog: Catalog, files_per_region: int = 6) -> Table:
    """An append table of one-row files, as months of small ingest batches leave it."""
    table = catalog.create_table("logs.events", EVENTS, partition_by=["region"])
    for i in range(files_per_region * len(REGIONS)):
        region = REGIONS[i % len(REGIONS)]
        table.append(pa.table({"id": pa.array([i], pa.int64()), "region": [region]}))
    return table


def orders_table(catalog: Catalog) -> Table:
    """A CDC table with three runs in each of 2 x 3 buckets, updates and deletes among them."""
    table = catalog.create_table(
        "shop.orders",
        EVENTS,
        primary_key=["id", "region"],
        hash_buckets=3,
        partition_by=["region"],
    )
    for region in ("eu", "us"):
        ids = pa.array(range(30), pa.int64())
        table.upsert(pa.table({"id": ids, "region": [region] * 30}))
        table.upsert(pa.table({"id": ids[:15], "region": [region] * 15}))
        table.delete(pa.table({"id": ids[20:], "region": [region] * 10}))
    return table


def executors(dsn: str, warehouse: Path) -> ExecutorCatalog:
    return ExecutorCatalog(dsn=dsn, warehouse=str(warehouse), schema=DEFAULT_SCHEMA)


def test_a_backlog_compacted_on_spark_reads_the_same_with_fewer_files(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, spark: SparkSession
):
    events, orders = events_table(catalog), orders_table(catalog)
    before = {t.name: (rows_at(t), t.current_version()) for t in (events, orders)}

    run = spark_engine(spark, executors(catalog_dsn, warehouse), catalog)
    report = compact_backlog(catalog, [events.name, orders.name], run, engine_name="spark")

    assert report.failed == 0
    assert {r.status for r in report.results} == {"committed"}
    assert len(report.results) == len(REGIONS) + 6  # one task per partition, per bucket
    for table in (events, orders):
        table.refresh()
        rows, version = before[table.name]
        assert rows_at(table) == rows
        assert rows_at(table, version) == rows  # time travel still reads the old files
        parts = table.plan().partitions
        assert parts and all(len(p.files) == 1 for p in parts), table.name
        history = table.history(limit=20)
        compactions = [v for v in history if v.op is CommitOp.COMPACTION]
        assert len(compactions) == table.current_version() - version
        assert all(v.writer_id.startswith(COMPACTOR_WRITER_PREFIX) for v in compactions)
    ids = {f"{COMPACTOR_WRITER_PREFIX}{r.task.task_id}" for r in report.results}
    landed = {v.writer_id for t in (events, orders) for v in t.history(limit=20)}
    assert ids <= landed


def test_an_append_that_lands_during_the_job_is_kept(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, spark: SparkSession
):
    events = events_table(catalog)
    plan = plan_compaction(catalog, events.name)
    events.append(pa.table({"id": pa.array([999], pa.int64()), "region": ["eu"]}))  # mid-job
    expected = rows_at(events)

    results = spark_engine(spark, executors(catalog_dsn, warehouse), catalog)(plan.tasks)

    assert {r.status for r in results} == {"committed"}
    assert rows_at(events) == expected
    assert (999, "eu") in expected
    eu = next(p for p in events.plan().partitions if p.partition_desc == "region=eu")
    assert len(eu.files) == 2  # the compacted file, then the append, reordered after it


def test_a_task_run_again_by_spark_commits_once(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, spark: SparkSession
):
    """Spark re-runs a task whose executor was lost, and may run a speculative copy beside it:
    both carry the task's commit key, so only one run lands and the others write nothing."""
    events = events_table(catalog)
    [task, *_] = plan_compaction(catalog, events.name).tasks
    run = spark_engine(spark, executors(catalog_dsn, warehouse), catalog, spark_tasks=2)

    side_by_side = run([task, task])  # two attempts at once, in two Spark tasks
    assert sorted(r.status for r in side_by_side) == ["already-done", "committed"]
    version, disk = events.current_version(), files_on_disk(events)

    retried = run([task])  # the attempt after the executor died past its commit

    assert [r.status for r in retried] == ["already-done"]
    assert events.current_version() == version
    assert files_on_disk(events) == disk  # the re-run wrote nothing
    inputs = {f.path for f in task.inputs}
    live = {f.path for f in events.plan().files}
    assert disk == inputs | live  # the losing attempt left no file behind
    history = [v for v in events.history(limit=50) if v.op is CommitOp.COMPACTION]
    assert len(history) == 1


def test_a_worker_killed_mid_task_then_the_job_run_again_commits_each_task_once(
    catalog: Catalog, catalog_dsn: str, warehouse: Path, spark: SparkSession
):
    """The task of logs.other writes its output, then waits for the table's head lock, which
    the test holds, until its Python worker is killed. Local mode does not retry, so the job
    fails, and the driver learns from the commit keys which tasks landed. Run again, as
    Spark's retry of every task would be, each task lands exactly once."""
    events = events_table(catalog)
    other = catalog.create_table("logs.other", EVENTS)
    for i in range(6):
        other.append(pa.table({"id": pa.array([i], pa.int64()), "region": ["eu"]}))
    expected = {t.name: rows_at(t) for t in (events, other)}
    tasks = [t for name in (events.name, other.name) for t in plan_compaction(catalog, name).tasks]
    run = spark_engine(spark, executors(catalog_dsn, warehouse), catalog, spark_tasks=4)
    job: list[list[TaskResult]] = []
    with head_locked(catalog_dsn, other):
        thread = threading.Thread(target=lambda: job.append(run(tasks)))
        thread.start()
        wait_for(lambda: len(compactions(events)) == 3, "the events tasks landed")
        wait_for(lambda: len(files_on_disk(other)) > 6, "the other task wrote its output")
        kill_python_workers()
        thread.join(timeout=120)

    [first] = job
    status = {r.task.table: r.status for r in first if r.task.table == other.name}
    assert status == {other.name: "failed"}
    [lost] = [r for r in first if r.task.table == other.name]
    assert lost.error.startswith("the Spark job failed: ")
    assert {r.status for r in first if r.task.table == events.name} == {"already-done"}
    assert compactions(other) == []

    again = run(tasks)  # the retry of every task, landed ones included

    assert sorted(r.status for r in again) == ["already-done"] * 3 + ["committed"]
    assert (len(compactions(events)), len(compactions(other))) == (3, 1)
    assert {t.name: rows_at(t) for t in (events, other)} == expected


@contextmanager
def head_locked(dsn: str, table: Table) -> Iterator[None]:
    """Hold the table's head row lock, as a long commit would: its committers wait."""
    lock = sql.SQL("SELECT 1 FROM {}.table_head WHERE table_id = %s FOR UPDATE").format(
        sql.Identifier(DEFAULT_SCHEMA)
    )
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(lock, (table.meta.table_id,))
        yield


def compactions(table: Table) -> list[int]:
    return [v.version for v in table.history(limit=100) if v.op is CommitOp.COMPACTION]


DAEMON = "pyspark.daemon"


def kill_python_workers() -> None:
    """SIGKILL the Python workers of this test process's Spark: the processes forked by the
    ``pyspark.daemon`` its JVM started (never another process's Spark, nor the daemon)."""
    procs = processes()
    jvms = {pid for pid, proc in procs.items() if proc.ppid == os.getpid()}
    daemons = {
        pid for pid, proc in procs.items() if proc.ppid in jvms and "pyspark.daemon" in proc.cmdline
    }
    workers = [pid for pid, proc in procs.items() if proc.ppid in daemons]
    assert workers, "no Python worker to kill"
    for pid in workers:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_the_command_reports_per_table_and_exits_1_when_a_task_fails(
    catalog: Catalog, catalog_dsn: str
):
    events, orders = events_table(catalog), orders_table(catalog)
    lost = events.plan(partitions=["region=us"]).files[0]
    (Path(events.meta.location) / lost.path).unlink()  # a task that cannot read its input

    result = lakestream(
        "compact", events.name, orders.name, "--engine", "spark", "--master", "local[2]",
        "--json", dsn=catalog_dsn,
    )  # fmt: skip

    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: 1 compaction task(s) failed (see the report); run again"
    )
    report = json.loads(result.stdout)
    by_table = {t["table"]: t for t in report["tables"]}
    assert by_table["logs.events"]["outcomes"]["committed"] == 2
    assert by_table["logs.events"]["outcomes"]["failed"] == 1
    [failed] = [t for t in by_table["logs.events"]["tasks"] if t["outcome"] == "failed"]
    assert failed["partition"] == "region=us" and "FileNotFoundError" in failed["error"]
    assert by_table["logs.events"]["files_in"] == 18
    assert by_table["shop.orders"]["outcomes"]["committed"] == 6
    assert by_table["shop.orders"]["files_out"] == 6
    assert len(orders.plan().files) == 6


def test_all_tables_on_the_local_engine_skips_disabled_ones(catalog: Catalog, catalog_dsn: str):
    events = events_table(catalog)
    catalog.create_table("logs.frozen", EVENTS, properties={"compaction.enabled": "false"})

    result = lakestream("compact", "--all", dsn=catalog_dsn)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("compact (local): 2 table(s), 3 task(s), 0 failed")
    assert lines[1].startswith("logs.events at version 18: 3 task(s), files 18 -> 3, bytes ")
    assert lines[1].endswith("committed 3, discarded 0, failed 0")
    assert lines[2].startswith("logs.frozen: skipped, compaction is disabled")
    assert len(events.plan().files) == 3


def test_without_the_spark_extra_it_says_what_to_install_before_connecting():
    hide_pyspark = (
        "import sys; sys.modules['pyspark'] = None; from jobs.cli import main; "
        "sys.exit(main(['compact', 'logs.events', '--engine', 'spark']))"
    )
    nowhere = "postgresql://lakestream@127.0.0.1:1/lakestream"  # never reached
    env = {**os.environ, "LAKESTREAM_CATALOG_DSN": nowhere}
    result = subprocess.run(
        [sys.executable, "-c", hide_pyspark], env=env, text=True, capture_output=True, check=False
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: pyspark is not installed: this command needs the Spark extra; install it with "
        "pip install 'lakestream[spark]'"
    ]


def test_naming_no_table_is_a_usage_mistake(catalog_dsn: str):
    result = lakestream("compact", "--engine", "local", dsn=catalog_dsn)
    assert result.returncode == 2
    assert "name the tables to compact, or pass --all" in result.stderr
