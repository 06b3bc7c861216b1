"""Real Debezium with ``provide.transaction.metadata=true``: transfers between two rows of
``accounts`` plus an ``audit`` row, each one PostgreSQL transaction, captured by Debezium's
connector in Kafka Connect (``docker/connector.json``'s settings) into topics created beforehand
- data topics on several partitions, the transaction topic on one. Ingested with a small
``max_offsets_per_trigger`` so transactions straddle batches: at every lake version the
invariants hold with ``consistent``; the same events ingested with ``eventual`` break them at
some version."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from catalog import Catalog
from ingest.debezium import DecoderConfig
from ingest.job import IngestJobConfig, run_ingest
from ingest.kafka.connect import LocalConnect
from ingest.transactions import TransactionMode
from jobs.localpg import LocalPostgres
from tests.fixtures.broker import create_topic
from tests.fixtures.debezium import (
    DebeziumCapture,
    PostgresSource,
    create_source_database,
    drop_source_database,
)
from tests.integration.transactions.support import START_BALANCE, broken, cuts, new_topics

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ACCOUNTS = 6
TRANSFERS = 30


class TransactionCapture(DebeziumCapture):
    """The capture with Debezium's transaction metadata turned on."""

    def properties(self) -> dict[str, str]:
        return {**super().properties(), "provide.transaction.metadata": "true"}


@pytest.fixture
def source_db(pg_server: LocalPostgres) -> Iterator[PostgresSource]:
    name = create_source_database(pg_server)
    yield PostgresSource(pg_server.port, name)
    drop_source_database(pg_server, name)


def make_bank(source: PostgresSource) -> psycopg.Connection[Any]:
    conn = psycopg.connect(
        f"host=127.0.0.1 port={source.port} user={source.user} dbname={source.database}",
        autocommit=True,
    )
    conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, balance bigint, moves bigint)")
    conn.execute("CREATE TABLE audit (id int PRIMARY KEY, amount bigint)")
    for i in range(1, ACCOUNTS + 1):
        conn.execute("INSERT INTO accounts VALUES (%s, %s, 0)", (i, START_BALANCE))
    return conn


def transfer(conn: psycopg.Connection[Any], rng: random.Random, audit_id: int) -> None:
    a, b = rng.sample(range(1, ACCOUNTS + 1), 2)
    amount = rng.randint(1, 50)
    with conn.transaction():
        move = "UPDATE accounts SET balance = balance + %s, moves = moves + 1 WHERE id = %s"
        conn.execute(move, (-amount, a))
        conn.execute(move, (amount, b))
        conn.execute("INSERT INTO audit VALUES (%s, %s)", (audit_id, amount))


def table_rows(conn: psycopg.Connection[Any], name: str) -> dict[int, dict[str, Any]]:
    cursor = conn.execute(f"SELECT * FROM {name}")
    columns = [c.name for c in cursor.description or ()]
    return {row[0]: dict(zip(columns, row, strict=True)) for row in cursor.fetchall()}


def lake_rows(catalog: Catalog, name: str) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in catalog.load_table(name).scan().to_arrow().to_pylist()}


def create_topics(kafka: Any, prefix: str) -> None:
    """Before the connector writes them (Connect keeps an existing topic's partitions): accounts
    over 3 partitions and audit over 2 (by key), the transaction topic on one."""
    topics = {"public.accounts": 3, "public.audit": 2, "transaction": 1}
    for name, partitions in topics.items():
        create_topic(kafka.bootstrap_servers, f"{prefix}.{name}", partitions)


def job_config(kafka: Any, prefix: str, tmp_path: Path, job: str, **extra: Any) -> IngestJobConfig:
    return IngestJobConfig(
        job=job,
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / f"checkpoint-{job}",
        dead_letter_table="lakestream.dead_letters",
        topics=(f"{prefix}.public.accounts", f"{prefix}.public.audit", f"{prefix}.transaction"),
        hash_buckets=2,
        max_offsets_per_trigger=13,
        **extra,
    )


@pytest.mark.slow
def test_real_debezium_transactions_are_published_whole(
    source_db: PostgresSource,
    catalog: Catalog,
    kafka: Any,
    *,
    connect_worker: LocalConnect,
    spark: Any,
    tmp_path: Path,
) -> None:
    conn = make_bank(source_db)
    prefix = new_topics().prefix
    rng = random.Random(3)
    create_topics(kafka, prefix)
    with TransactionCapture(connect_worker, source_db, prefix) as capture:
        capture.wait_for(ACCOUNTS)  # the snapshot, before any transfer
        for n in range(1, TRANSFERS + 1):
            transfer(conn, rng, n)
        # 3 change events and a BEGIN and an END marker per transfer
        events = capture.wait_for(ACCOUNTS + 5 * TRANSFERS, timeout=120)
    markers = [e for e in events if e.destination == f"{prefix}.transaction"]
    assert len(markers) == 2 * TRANSFERS

    run_ingest(job_config(kafka, prefix, tmp_path, "bank_real"), spark, catalog)
    plain = job_config(
        kafka, prefix, tmp_path, "bank_real_eventual", transactions=TransactionMode.EVENTUAL,
        decoder=DecoderConfig(namespaces={"public": "eventual"}),
    )  # fmt: skip
    run_ingest(plain, spark, catalog)

    for name in ("accounts", "audit"):
        want = table_rows(conn, name)
        assert {i: strip(r) for i, r in lake_rows(catalog, f"public.{name}").items()} == want
        assert {i: strip(r) for i, r in lake_rows(catalog, f"eventual.{name}").items()} == want
    consistent = [s for _, s in cuts(catalog) if len(s["public.accounts"]) == ACCOUNTS]
    assert len(consistent) >= 5
    assert [broken(s, ACCOUNTS) for s in consistent if broken(s, ACCOUNTS)] == []
    eventual = [
        s
        for _, s in cuts(catalog, ("eventual.accounts", "eventual.audit"))
        if len(s["public.accounts"]) == ACCOUNTS
    ]
    assert any(broken(s, ACCOUNTS) for s in eventual)
    conn.close()


def strip(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if not k.startswith("_ls_")}
