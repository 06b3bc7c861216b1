"""The cluster tests' source, job file and driver runs.

The source is a real PostgreSQL table captured by real Debezium (:mod:`tests.fixtures.debezium`);
the job runs as an operator runs it on a cluster: a driver process of its own (``lakestream
ingest`` or ``spark-submit``), with a YAML file, on a "host" that cannot see the warehouse's
files (:meth:`tests.fixtures.spark_cluster.SparkCluster.driver_command`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import yaml

from catalog import Catalog
from catalog.files.storage import StorageOptions
from ingest.kafka.connect import LocalConnect
from tests.fixtures.debezium import CapturedEvent, DebeziumCapture, PostgresSource
from tests.fixtures.ingest_cli import CliRun
from tests.fixtures.jsonlog import split_log
from tests.fixtures.spark_cluster import SPARK_SUBMIT, SparkCluster

ROOT = Path(__file__).resolve().parents[3]
LAKE_TABLE = "shop.orders"
DLQ = "lakestream.dead_letters"
PACKAGES = ("catalog", "ingest", "jobs")
Row = dict[str, object]


class Orders:
    """The source table ``orders`` and the Debezium events its changes must produce."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.expected: Counter[str] = Counter()

    def create(self, rows: int) -> None:
        self.conn.execute(
            "CREATE TABLE orders (id integer PRIMARY KEY, item text NOT NULL, qty integer,"
            " price numeric(10, 2))"
        )
        self.conn.execute(
            "INSERT INTO orders SELECT i, 'item ' || i, mod(i, 7), i * 1.25"
            " FROM generate_series(1, %(rows)s) AS i",
            {"rows": rows},
        )
        self.expected["r"] += rows  # the snapshot reads each row once

    def change(self) -> None:
        """Updates, deletes and new rows after the snapshot, some in one transaction."""
        count = self._run("UPDATE orders SET qty = qty + 100, item = item || ' ü' WHERE id % 5 = 0")
        self.expected["u"] += count
        deleted = self._run("DELETE FROM orders WHERE id % 11 = 0")
        self.expected["d"] += deleted
        self.expected["tombstone"] += deleted
        with self.conn.transaction():
            self.expected["c"] += self._run(
                "INSERT INTO orders VALUES (-1, 'new', NULL, NULL), (-2, 'newer', 3, -0.01)"
            )
            self.expected["u"] += self._run("UPDATE orders SET price = NULL WHERE id = -2")

    def _run(self, query: str) -> int:
        count = self.conn.execute(query).rowcount  # type: ignore[arg-type]
        assert count > 0, query
        return count

    def rows(self) -> dict[object, Row]:
        cursor = self.conn.execute("SELECT id, item, qty, price FROM orders")
        return {r[0]: {"id": r[0], "item": r[1], "qty": r[2], "price": r[3]} for r in cursor}


def capture(
    connect: LocalConnect, source: PostgresSource, name: str, rows: int
) -> list[CapturedEvent]:
    """Debezium's events of ``rows`` snapshotted rows and the changes of :meth:`Orders.change`."""
    with psycopg.connect(source.dsn, autocommit=True) as conn:
        orders = Orders(conn)
        orders.create(rows)
        with DebeziumCapture(connect, source, name) as engine:
            engine.wait_for(rows, timeout=120)
            orders.change()
            engine.wait_for(sum(orders.expected.values()), timeout=60)
            events = engine.stop()
    assert len(events) == sum(orders.expected.values()), engine.log_tail()
    return events


def source_rows(source: PostgresSource) -> dict[object, Row]:
    with psycopg.connect(source.dsn, autocommit=True) as conn:
        return Orders(conn).rows()


def lake_rows(catalog: Catalog) -> dict[object, Row]:
    table = catalog.load_table(LAKE_TABLE).scan(columns=["id", "item", "qty", "price"])
    return {r["id"]: r for r in table.to_arrow().to_pylist()}


def dead_letters(catalog: Catalog) -> list[Row]:
    rows: list[Row] = catalog.load_table(DLQ).scan().to_arrow().to_pylist()
    return rows


def job_file(
    path: Path,
    *,
    dsn: str,
    warehouse: str,
    storage: StorageOptions | None,
    topic: str,
    master: str | None,
    **extra: Any,
) -> Path:
    """The job's YAML: ``master: None`` leaves the master to spark-submit."""
    spark: dict[str, Any] = {"master": master}
    if master is not None:
        # one executor per worker (1 core, 1g each); the driver is reached on loopback
        spark["conf"] = {"spark.driver.host": "127.0.0.1", "spark.executor.memory": "768m"}
    config = {
        "job": "orders-cdc",
        "catalog": {"dsn": dsn, "warehouse": warehouse, **_storage_section(storage)},
        "kafka": {"bootstrap_servers": extra.pop("bootstrap_servers")},
        "source": {"topics": [topic], **extra.pop("source", {})},
        "tables": {"debezium_topic_tables": {topic: LAKE_TABLE}, "hash_buckets": 2},
        "checkpoint": str(path.parent / "checkpoint"),
        "spark": spark,
        **extra,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _storage_section(storage: StorageOptions | None) -> dict[str, Any]:
    """The job's ``catalog.storage`` settings (keys in clear: the file is the test's own)."""
    if storage is None:
        return {}
    plain = storage.model_dump(exclude_none=True)
    for secret in ("access_key", "secret_key", "session_token"):
        if secret in plain:
            plain[secret] = plain[secret].get_secret_value()
    return {"storage": plain}


def driver_env() -> dict[str, str]:
    """The driver's environment: this tree first, this interpreter, loopback."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }


def cli_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "jobs.cli", "ingest", "--config", str(config)]


def submit_command(cluster: SparkCluster, config: Path, py_files: Path) -> list[str]:
    """``spark-submit`` of the CLI's file with the project shipped as a zip: no PYTHONPATH."""
    conf = {
        "spark.driver.host": "127.0.0.1",
        "spark.executor.memory": "768m",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
    }
    argv = [SPARK_SUBMIT, "--master", cluster.master_url, "--py-files", str(py_files)]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    return [*argv, str(ROOT / "jobs" / "cli.py"), "ingest", "--config", str(config)]


def project_zip(path: Path) -> Path:
    """The project's packages as one zip for ``--py-files`` (code and the SQL it reads)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in PACKAGES:
            for file in sorted((ROOT / package).rglob("*")):
                if file.is_file() and "__pycache__" not in file.parts:
                    archive.write(file, file.relative_to(ROOT))
    return path


def start_driver(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent)


def finish_driver(process: subprocess.Popen[bytes], log: Path, timeout: float = 240) -> CliRun:
    try:
        process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    events, other = split_log(log.read_text(errors="replace"))
    return CliRun(process.returncode, events, other, "")


def run_driver(argv: list[str], env: dict[str, str], log: Path, timeout: float = 240) -> CliRun:
    return finish_driver(start_driver(argv, env, log), log, timeout)


def assert_ran(run: CliRun) -> None:
    assert run.returncode == 0, run.describe()
    assert not run.named("ingest_failed"), run.describe()
