"""A change feed end to end: PostgreSQL -> Debezium (Kafka Connect) -> Apache Kafka ->
``lakestream`` ingest -> CDC table -> a second Spark job reading
``spark.readStream.format("lakestream")`` -> an aggregate table.

The aggregate (amount and orders per region, :mod:`.support`) must equal the same
aggregate recomputed from the source table after the snapshot and after streamed changes,
although the reader is killed (SIGKILL) right after a batch's catalog commit and before Spark
records the batch - the moment at which a replay would apply the batch twice if exactly-once
did not hold - and restarted from its checkpoint.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from catalog import Catalog
from ingest.debezium import DecoderConfig
from ingest.job import IngestJobConfig, run_ingest
from ingest.kafka.connect import LocalConnect
from jobs.localpg import LocalPostgres
from tests.fixtures.debezium import (
    DebeziumCapture,
    PostgresSource,
    create_source_database,
    drop_source_database,
)
from tests.integration.spark_read.support import JOB, SOURCE, TARGET

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

REGIONS = ("eu", "us", "apac")
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def source_db(pg_server: LocalPostgres) -> Iterator[PostgresSource]:
    name = create_source_database(pg_server)
    yield PostgresSource(pg_server.port, name)
    drop_source_database(pg_server, name)


def source_totals(conn: psycopg.Connection[Any]) -> dict[str, tuple[int, int]]:
    rows = conn.execute(
        "SELECT region, sum(amount)::bigint, count(*) FROM orders GROUP BY region"
    ).fetchall()
    return {region: (int(amount), int(orders)) for region, amount, orders in rows}


def lake_totals(catalog: Catalog) -> dict[str, tuple[int, int]]:
    rows = catalog.load_table(TARGET).scan().to_arrow().to_pylist()
    return {r["region"]: (r["amount"], r["orders"]) for r in rows if r["orders"]}


def run_aggregate_job(
    dsn: str, checkpoint: Path, *, kill_after_batch: int | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if kill_after_batch is not None:
        env["AGGREGATE_JOB_KILL_AFTER_BATCH"] = str(kill_after_batch)
    return subprocess.run(
        [sys.executable, "-m", "tests.integration.spark_read.support", dsn, str(checkpoint)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def changes(
    conn: psycopg.Connection[Any],
    rng: random.Random,
    next_id: int,
    count: int,
    kinds: tuple[str, ...] = ("insert", "update", "update", "delete"),
) -> tuple[int, int]:
    """``count`` random inserts, updates (amount and region) and deletes; the next free id and
    the events Debezium sends for them (a delete is an event and a tombstone)."""
    events = 0
    for _ in range(count):
        ids = [r[0] for r in conn.execute("SELECT id FROM orders").fetchall()]
        kind = rng.choice(kinds) if ids else "insert"
        if kind == "insert":
            conn.execute(
                "INSERT INTO orders VALUES (%s, %s, %s)",
                (next_id, rng.choice(REGIONS), rng.randint(1, 500)),
            )
            next_id += 1
            events += 1
        elif kind == "update":
            conn.execute(
                "UPDATE orders SET region = %s, amount = %s WHERE id = %s",
                (rng.choice(REGIONS), rng.randint(1, 500), rng.choice(ids)),
            )
            events += 1
        else:
            conn.execute("DELETE FROM orders WHERE id = %s", (rng.choice(ids),))
            events += 2
    return next_id, events


def test_a_change_stream_keeps_an_aggregate_exactly_once_across_a_kill(
    source_db: PostgresSource,
    catalog: Catalog,
    catalog_dsn: str,
    kafka: Any,
    *,
    connect_worker: LocalConnect,
    spark: Any,
    tmp_path: Path,
) -> None:
    name = f"ls{uuid.uuid4().hex[:8]}"
    topic = f"{name}.public.orders"
    config = IngestJobConfig(
        job="orders-cdc",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / "ingest-checkpoint",
        dead_letter_table="lakestream.dead_letters",
        topics=(topic,),
        decoder=DecoderConfig(topic_tables={topic: SOURCE}),
        hash_buckets=2,
        max_offsets_per_trigger=15,  # several lake versions per round
    )
    checkpoint = tmp_path / "aggregate-checkpoint"
    rng = random.Random(20261206)
    with psycopg.connect(source_db.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id integer PRIMARY KEY, region text, amount integer)")
        next_id, _ = changes(conn, rng, 1, 40, kinds=("insert",))
        emitted = conn.execute("SELECT count(*) FROM orders").fetchone()[0]
        with DebeziumCapture(connect_worker, source_db, name) as capture:
            capture.wait_for(emitted, timeout=90)  # the snapshot
            capture.stop()
        run_ingest(config, spark, catalog)

        first = run_aggregate_job(catalog_dsn, checkpoint)  # batch 0: the table as inserts
        assert first.returncode == 0, first.stderr[-3000:]
        assert lake_totals(catalog) == source_totals(conn)

        # streamed changes, ingested as several versions; the job dies after its next batch
        with DebeziumCapture(connect_worker, source_db, name) as capture:
            _, emitted = changes(conn, rng, next_id, 60)
            capture.wait_for(emitted, timeout=90)
            capture.stop()
        versions_before = catalog.load_table(SOURCE).current_version()
        run_ingest(config, spark, catalog)
        assert catalog.load_table(SOURCE).current_version() >= versions_before + 2
        landed = catalog.load_table(TARGET).current_version()
        killed = run_aggregate_job(catalog_dsn, checkpoint, kill_after_batch=1)
        assert killed.returncode == -9, killed.stderr[-3000:]
        assert catalog.load_table(TARGET).current_version() == landed + 1  # batch 1 committed
        finished = run_aggregate_job(catalog_dsn, checkpoint)
        assert finished.returncode == 0, finished.stderr[-3000:]
        assert lake_totals(catalog) == source_totals(conn)

    consumer = catalog.consumer(catalog.load_table(SOURCE), JOB)
    assert consumer.version == catalog.load_table(SOURCE).current_version()
