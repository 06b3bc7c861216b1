"""Real Debezium with ``provide.transaction.metadata=true`` and its transaction topic on 3
partitions (issue 46): a shop whose order headers keep ``total`` and ``lines`` equal to the sum
and count of their order lines. Each PostgreSQL transaction places an order with its lines, adds
a line to an order, or removes one (a delete, and Debezium's tombstone after it), changing the
header with it. Debezium's connector runs in Kafka Connect (``docker/connector.json``'s
settings), whose producer keys every topic: the default partitioner spreads the BEGIN and END
markers (keyed by their ids) over the 3 partitions of the transaction topic. Ingested in
batches of a few records, every lake version keeps each header equal to its lines, and the
lake ends equal to the source."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest

from catalog import Catalog
from ingest.job import IngestJobConfig, run_ingest
from ingest.kafka.apache_kafka import create_topic
from ingest.kafka.connect import LocalConnect
from ingest.transactions import TransactionMode
from jobs.localpg import LocalPostgres
from tests.fixtures.debezium import (
    CapturedEvent,
    DebeziumCapture,
    PostgresSource,
    create_source_database,
    drop_source_database,
)
from tests.integration.transactions.support import batch_states, new_topics

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ORDERS, LINES = "public.orders", "public.order_lines"
#: Orders there before the connector starts (its snapshot): empty, so balanced at any cut.
OPEN_ORDERS = 2
TRANSACTIONS = 30
#: Partitions of each topic, as a cluster might create them.
PARTITIONS = {ORDERS: 3, LINES: 2, "transaction": 3}

Conn = psycopg.Connection[Any]


class TransactionCapture(DebeziumCapture):
    """The capture with Debezium's transaction metadata turned on."""

    def properties(self) -> dict[str, str]:
        return {**super().properties(), "provide.transaction.metadata": "true"}


@pytest.fixture
def source_db(pg_server: LocalPostgres) -> Iterator[PostgresSource]:
    name = create_source_database(pg_server)
    yield PostgresSource(pg_server.port, name)
    drop_source_database(pg_server, name)


def open_shop(source: PostgresSource) -> Conn:
    conn = psycopg.connect(
        f"host=127.0.0.1 port={source.port} user={source.user} dbname={source.database}",
        autocommit=True,
    )
    conn.execute("CREATE TABLE orders (id int PRIMARY KEY, total bigint, lines int)")
    conn.execute("CREATE TABLE order_lines (id int PRIMARY KEY, order_id int, amount bigint)")
    for order in range(1, OPEN_ORDERS + 1):
        conn.execute("INSERT INTO orders VALUES (%s, 0, 0)", (order,))
    return conn


class Shop:
    """Runs the shop's transactions on the source and counts the events Debezium will give."""

    def __init__(self, conn: Conn, rng: random.Random) -> None:
        self.conn = conn
        self.rng = rng
        self.orders = OPEN_ORDERS
        self.next_line = 1
        self.events = OPEN_ORDERS  # the snapshot's reads
        self.done: Counter[str] = Counter()

    def act(self) -> None:
        """One transaction: place an order (a third of the time, or while few are open), add a
        line to one, or remove a line from one that has two or more."""
        choice = self.rng.random()
        lined = self.conn.execute(
            "SELECT order_id FROM order_lines GROUP BY order_id HAVING count(*) >= 2"
        ).fetchall()
        with self.conn.transaction():
            if choice < 0.35:
                self._place()
                self.done["place"] += 1
            elif choice < 0.75 or not lined:
                self._add(self.rng.randint(1, self.orders))
                self.done["add"] += 1
            else:
                self._remove(self.rng.choice(lined)[0])
                self.done["remove"] += 1
        self.events += 2  # its BEGIN and END markers

    def _place(self) -> None:
        self.orders += 1
        amounts = [self.rng.randint(1, 100) for _ in range(self.rng.randint(1, 3))]
        self.conn.execute(
            "INSERT INTO orders VALUES (%s, %s, %s)", (self.orders, sum(amounts), len(amounts))
        )
        for amount in amounts:
            self._line(self.orders, amount)
        self.events += 1 + len(amounts)

    def _add(self, order: int) -> None:
        amount = self.rng.randint(1, 100)
        self._line(order, amount)
        self._header(order, amount, 1)
        self.events += 2

    def _remove(self, order: int) -> None:
        line, amount = self.conn.execute(
            "SELECT id, amount FROM order_lines WHERE order_id = %s ORDER BY id LIMIT 1", (order,)
        ).fetchone() or (None, None)
        assert line is not None and amount is not None
        self.conn.execute("DELETE FROM order_lines WHERE id = %s", (line,))
        self._header(order, -amount, -1)
        self.events += 3  # the delete, its tombstone, the header's update

    def _line(self, order: int, amount: int) -> None:
        self.conn.execute(
            "INSERT INTO order_lines VALUES (%s, %s, %s)", (self.next_line, order, amount)
        )
        self.next_line += 1

    def _header(self, order: int, amount: int, lines: int) -> None:
        self.conn.execute(
            "UPDATE orders SET total = total + %s, lines = lines + %s WHERE id = %s",
            (amount, lines, order),
        )


def unbalanced(state: Mapping[str, list[dict[str, Any]]]) -> str | None:
    """Why a lake version shows a transaction in part: a header whose total or line count is
    not its lines', or a line of an order that is not there. None when every header is whole."""
    lines: dict[int, list[int]] = {}
    for line in state[LINES]:
        lines.setdefault(line["order_id"], []).append(line["amount"])
    orders = {row["id"]: row for row in state[ORDERS]}
    orphans = sorted(set(lines) - set(orders))
    if orphans:
        return f"lines of orders {orphans} that are not there"
    for order, row in sorted(orders.items()):
        amounts = lines.get(order, [])
        if (row["total"], row["lines"]) != (sum(amounts), len(amounts)):
            return f"order {order} says {row['total']} in {row['lines']} lines; lines: {amounts}"
    return None


def create_topics(kafka: Any, prefix: str) -> None:
    """Before the connector writes them (Connect keeps an existing topic's partitions)."""
    for name, partitions in PARTITIONS.items():
        create_topic(kafka.bootstrap_servers, f"{prefix}.{name}", partitions)


def markers_per_partition(prefix: str, events: list[CapturedEvent]) -> dict[int, int]:
    """How many markers each partition of the transaction topic got."""
    markers: dict[int, int] = {}
    for event in events:
        if event.destination == f"{prefix}.transaction":
            markers[event.partition] = markers.get(event.partition, 0) + 1
    return markers


def source_rows(conn: Conn, name: str) -> dict[int, dict[str, Any]]:
    cursor = conn.execute(f"SELECT * FROM {name}")
    columns = [c.name for c in cursor.description or ()]
    return {row[0]: dict(zip(columns, row, strict=True)) for row in cursor.fetchall()}


def lake_rows(catalog: Catalog, name: str) -> dict[int, dict[str, Any]]:
    rows = catalog.load_table(name).scan().to_arrow().to_pylist()
    return {r["id"]: {k: v for k, v in r.items() if not k.startswith("_ls_")} for r in rows}


@pytest.mark.slow
def test_real_debezium_on_three_transaction_partitions_keeps_every_order_whole(
    source_db: PostgresSource,
    catalog: Catalog,
    kafka: Any,
    *,
    connect_worker: LocalConnect,
    spark: Any,
    tmp_path: Path,
) -> None:
    conn = open_shop(source_db)
    shop = Shop(conn, random.Random(46))
    prefix = new_topics().prefix
    create_topics(kafka, prefix)
    with TransactionCapture(connect_worker, source_db, prefix) as capture:
        capture.wait_for(OPEN_ORDERS)  # the snapshot, before any transaction
        for _ in range(TRANSACTIONS):
            shop.act()
        events = capture.wait_for(shop.events, timeout=120)
    assert len(events) == shop.events
    assert min(shop.done[kind] for kind in ("place", "add", "remove")) >= 5
    markers = markers_per_partition(prefix, events)
    assert sorted(markers) == [0, 1, 2] and sum(markers.values()) == 2 * TRANSACTIONS

    job = IngestJobConfig(
        job="shop",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / "checkpoint",
        dead_letter_table="lakestream.dead_letters",
        topics=tuple(f"{prefix}.{name}" for name in PARTITIONS),
        hash_buckets=2,
        max_offsets_per_trigger=13,
        transactions=TransactionMode.CONSISTENT,
        partition_idle_s=0.2,
    )
    run = run_ingest(job, spark, catalog)

    assert run.records_read == len(events)
    assert lake_rows(catalog, ORDERS) == source_rows(conn, "orders")
    assert lake_rows(catalog, LINES) == source_rows(conn, "order_lines")
    states = list(batch_states(catalog, (ORDERS, LINES)))
    assert len(states) >= 5  # versions of both tables, cut by batches of 13 records
    assert [(n, why) for n, state in states if (why := unbalanced(state))] == []
    for name in (ORDERS, LINES):  # whole transactions, the watermark only moving forward
        history = sorted(catalog.load_table(name).history(limit=1000), key=lambda v: v.version)
        marks = [v for v in history if v.source_watermark is not None]
        assert len(marks) >= 3
        positions = [v.source_watermark.position for v in marks if v.source_watermark]
        assert positions == sorted(positions)
        assert [v.watermark_exceptions for v in marks if v.watermark_exceptions] == []
    conn.close()
