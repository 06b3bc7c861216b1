"""``lakestream compactor`` as a user runs it: subprocesses against a real catalog."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from catalog import Catalog
from tests.fixtures.compaction import rows_at
from tests.fixtures.http import free_port, get

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
ORDERS = pa.schema([("id", pa.int64()), ("total", pa.float64())])


def env(dsn: str, warehouse: Path) -> dict[str, str]:
    return {
        **os.environ,
        "LAKESTREAM_CATALOG_DSN": dsn,
        "LAKESTREAM_WAREHOUSE": str(warehouse),
        "LAKESTREAM_LOG_LEVEL": "WARNING",
    }


def lakestream(*args: str, dsn: str, warehouse: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobs.cli", *args],
        cwd=ROOT,
        env=env(dsn, warehouse),
        text=True,
        capture_output=True,
        timeout=300,
        check=False,
    )


def runs_table(catalog: Catalog, name: str = "shop.orders", buckets: int = 2):
    table = catalog.create_table(name, ORDERS, primary_key=["id"], hash_buckets=buckets)
    for i in range(6):
        table.upsert(pa.table({"id": range(i * 3, i * 3 + 10), "total": [float(i)] * 10}))
    return table


def wait_for(check, timeout: float = 120.0):
    """Poll until ``check()`` is truthy (a wait, not a timed assertion); its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_once_compacts_and_status_reports_it(catalog: Catalog, catalog_dsn, warehouse):
    orders = runs_table(catalog)
    expected = rows_at(orders)
    ingested = sum(f.size_bytes for f in orders.plan().files)
    before = json.loads(
        lakestream("compactor", "status", "--json", dsn=catalog_dsn, warehouse=warehouse).stdout
    )
    assert [(s["table"], s["max_runs_per_bucket"], s["queued"]) for s in before] == [
        ("shop.orders", 6, 0)
    ]

    done = lakestream(
        "compactor", "run", "--once", "--workers", "0", dsn=catalog_dsn, warehouse=warehouse
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(orders.plan().files) == 2 and rows_at(orders) == expected

    status = lakestream("compactor", "status", "--json", dsn=catalog_dsn, warehouse=warehouse)
    [table] = json.loads(status.stdout)
    assert (table["max_runs_per_bucket"], table["small_files"], table["running"]) == (1, 0, [])
    assert sorted(r["outcome"] for r in table["last_results"]) == ["committed", "committed"]
    assert sum(r["rows_out"] for r in table["last_results"]) == len(expected)
    written = sum(r["bytes_out"] for r in table["last_results"])  # the folds' outputs
    assert table["amplification"] == {
        "compaction_bytes_written": written,
        "ingest_bytes_added": ingested,
        "ratio": written / ingested,
    }
    text = lakestream("compactor", "status", dsn=catalog_dsn, warehouse=warehouse)
    assert text.returncode == 0 and "shop.orders" in text.stdout and "committed" in text.stdout
    assert f"write amplification {written / ingested:.2f}x" in text.stdout


def test_once_with_a_worker_pool(catalog: Catalog, catalog_dsn, warehouse):
    tables = [runs_table(catalog, f"shop.t{i}", buckets=2) for i in range(2)]
    expected = [rows_at(t) for t in tables]
    done = lakestream(
        "compactor", "run", "--once", "--workers", "2", dsn=catalog_dsn, warehouse=warehouse
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert [len(t.plan().files) for t in tables] == [2, 2]
    assert [rows_at(t) for t in tables] == expected


def test_service_serves_health_and_metrics_compacts_on_commit_and_stops_on_sigterm(
    catalog: Catalog, catalog_dsn, warehouse, tmp_path
):
    orders = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=1)
    port = free_port()
    log = tmp_path / "compactor.log"
    with log.open("w") as err:
        service = subprocess.Popen(
            [sys.executable, "-m", "jobs.cli", "compactor", "run", "--workers", "1",
             "--poll-seconds", "60", "--metrics-port", str(port)],
            cwd=ROOT, env=env(catalog_dsn, warehouse), stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: get(f"{base}/healthz")[0] == 200), log.read_text()[-3000:]
        health = json.loads(get(f"{base}/healthz")[1])
        assert health["status"] == "ok" and health["workers"] == {"alive": 1, "wanted": 1}

        # commits wake the coordinator (NOTIFY): the poll interval alone would take a minute
        for i in range(5):
            orders.upsert(pa.table({"id": range(i, i + 4), "total": [float(i)] * 4}))
        expected = rows_at(orders)
        assert wait_for(lambda: len(orders.plan().files) == 1), log.read_text()[-3000:]
        assert rows_at(orders) == expected

        def counted() -> str:
            text = get(f"{base}/metrics")[1]
            return (
                text
                if 'lakestream_compactor_task_outcomes_total{outcome="committed"}' in text
                else ""
            )

        metrics = wait_for(counted)
        assert metrics, log.read_text()[-3000:]
        for name in (
            "lakestream_compactor_queue_depth",
            "lakestream_compactor_small_files",
            "lakestream_compactor_max_runs_per_bucket",
            "lakestream_compactor_task_duration_seconds_bucket",
            "lakestream_compactor_bytes_total",
            "lakestream_compactor_rows_total",
            "lakestream_compactor_lease_expiries_total",
        ):
            assert name in metrics
        assert get(f"{base}/nothing")[0] == 404
    finally:
        service.send_signal(signal.SIGTERM)
        code = service.wait(timeout=120)
    assert code == 0, log.read_text()[-3000:]
    assert "Traceback" not in log.read_text()


def test_mistakes_are_one_line_and_exit_2(catalog_dsn, warehouse):
    bad = lakestream("compactor", "run", "--workers", "-1", dsn=catalog_dsn, warehouse=warehouse)
    assert bad.returncode == 2 and "workers" in bad.stderr and "Traceback" not in bad.stderr
    nowhere = lakestream(
        "compactor", "status", dsn="postgresql://u:secret@127.0.0.1:1/db?connect_timeout=1",
        warehouse=warehouse,
    )  # fmt: skip
    assert nowhere.returncode == 2 and "cannot connect to the catalog" in nowhere.stderr
    assert "secret" not in nowhere.stderr and "Traceback" not in nowhere.stderr
