"""Real Debezium with ``schemas.enable=false`` through ``lakestream ingest``.

The JsonConverter without schemas sends values only: decimals as base64 bytes without their
scale, zoned timestamps as text, times and timestamps as plain numbers of some unit. The job
decodes such a topic with the schema of its table - one created first with the Python API, or
one declared in the YAML file and created by the job. One PostgreSQL source with two tables,
one Debezium connector, three runs of the job:

1. ``items`` goes into a table created first with the Python API: value for value, found by
   the topic pattern before the first batch (written once, nothing "created from the stream").
   This run leaves the state the command line's runs start from: it runs the job of the same
   YAML file in-process, on the session's Spark (a subprocess costs ~15 s more).
2. ``customers`` arrives with a wrong declaration: ``lakestream ingest`` (a subprocess from
   here on) fails at the dead-letter guard with one line and exit 1, and the tables, the
   dead-letter table and the stored offsets stay as they were (the batch also held good
   ``items`` changes: nothing of it was committed).
3. The declaration fixed, the same records are read again: both tables equal the source.

Debezium runs in the session's Kafka Connect worker with ``docker/connector.json``'s settings
(but ``schemas.enable=false``). The job reads copies of its topics (``<name>_lake.public.*``,
the records' bytes unchanged) because the test hands it ``customers`` only from run 2 on.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import random
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from catalog import Catalog
from ingest.kafka.apache_kafka import create_topic
from ingest.kafka.connect import LocalConnect
from ingest.sink.tables import create_cdc_table
from jobs.localpg import LocalPostgres
from tests.fixtures.broker import KafkaTestHelper
from tests.fixtures.debezium import (
    CapturedEvent,
    DebeziumCapture,
    DebeziumError,
    PostgresSource,
    create_source_database,
    drop_source_database,
)
from tests.fixtures.ingest_cli import CliRun, run_ingest_cli, run_ingest_in_process
from tests.integration.ingest.test_real_debezium import (
    COLUMNS,
    LAKE_TYPES,
    SourceTable,
    differences,
    engine_name,
    first_round,
    second_round,
    source_rows,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

DLQ = "lakestream.dead_letters"
CUSTOMERS_DDL = """
CREATE TABLE customers (
    id      bigint PRIMARY KEY,
    name    text NOT NULL,
    balance numeric(12, 3),
    joined  timestamptz,
    made    timestamp(3),
    opens   time(3),
    tags    text[]
)
"""
#: The declaration of ``shop.customers``: what the schemaless JSON cannot say, it says - the
#: scale of ``balance``, that ``joined`` is zoned, that ``made`` and ``opens`` are milliseconds.
DECLARED = {
    "primary_key": ["id"],
    "columns": {
        "id": "int64",
        "name": "string",
        "balance": "decimal(12,3)",
        "joined": "timestamp[us, UTC]",
        "made": "timestamp[ms]",
        "opens": "time[ms]",
        "tags": "list<string>",
    },
}
CUSTOMER_TYPES = {
    "id": pa.int64(),
    "name": pa.string(),
    "balance": pa.decimal128(12, 3),
    "joined": pa.timestamp("us", tz="UTC"),
    "made": pa.timestamp("ms"),
    "opens": pa.time64("us"),
    "tags": pa.list_(pa.string()),
}


@pytest.fixture
def source_db(pg_server: LocalPostgres) -> Iterator[PostgresSource]:
    name = create_source_database(pg_server)
    yield PostgresSource(pg_server.port, name)
    drop_source_database(pg_server, name)


class Customers:
    """The ``customers`` source table and the Debezium events its changes must produce."""

    def __init__(self, conn: psycopg.Connection[Any], rng: random.Random) -> None:
        self.conn, self.rng = conn, rng
        self.expected: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.expected.values())

    def row(self, id_: int) -> tuple[object, ...]:
        rng = self.rng

        def maybe(value: object) -> object:
            return None if rng.random() < 0.2 else value

        millis = dt.timedelta(milliseconds=rng.randint(0, 4_000_000_000_000))
        return (
            id_,
            f"customer {id_}",
            maybe(Decimal(rng.randint(-(10**12) + 1, 10**12 - 1)).scaleb(-3)),
            maybe(dt.datetime(1950, 1, 1, tzinfo=dt.UTC) + millis + dt.timedelta(microseconds=7)),
            maybe(dt.datetime(1950, 1, 1) + millis),
            maybe(dt.time(rng.randint(0, 23), rng.randint(0, 59), 7, 123_000)),
            maybe(rng.choice([[], ["a"], ["b", None, 'ü, "quoted"']])),
        )

    def insert(self, id_: int, op: str = "c") -> None:
        marks = ", ".join(["%s"] * 7)
        self.conn.execute(f"INSERT INTO customers VALUES ({marks})", self.row(id_))
        self.expected[op] += 1

    def update(self, id_: int) -> None:
        _, *values = self.row(id_)
        self.conn.execute(
            "UPDATE customers SET name = %s, balance = %s, joined = %s, made = %s, opens = %s,"
            " tags = %s WHERE id = %s",
            (*values, id_),
        )
        self.expected["u"] += 1

    def delete(self, id_: int) -> None:
        self.conn.execute("DELETE FROM customers WHERE id = %s", (id_,))
        self.expected.update(["d", "tombstone"])

    def rows(self) -> dict[int, dict[str, object]]:
        return source_rows(self.conn, "SELECT * FROM customers", json_columns=())


def lake_rows(catalog: Catalog, table: str, json_columns: tuple[str, ...] = ()) -> dict[int, Any]:
    rows = {}
    for record in catalog.load_table(table).scan().to_arrow().to_pylist():
        row = {k: v for k, v in record.items() if not k.startswith("_ls_")}
        for column in json_columns:
            row[column] = None if row[column] is None else ("json", json.loads(row[column]))
        rows[row["id"]] = row
    return rows


def assert_equal(want: dict[int, Any], got: dict[int, Any]) -> None:
    found = differences(want, got)
    assert not found, f"{len(found)} differences:\n" + "\n".join(found[:40])


def data_types(catalog: Catalog, table: str) -> dict[str, pa.DataType]:
    schema = catalog.load_table(table).schema
    return {f.name: f.type for f in schema if not f.name.startswith("_ls_")}


@contextlib.contextmanager
def capturing(
    connect: LocalConnect, source: PostgresSource, name: str
) -> Iterator[DebeziumCapture]:
    """The connector with schemaless JSON, stopped on the way out (also after a failure)."""
    engine = DebeziumCapture(connect, source, name, schemas=False).start()
    try:
        yield engine
    except BaseException:
        with contextlib.suppress(DebeziumError):
            engine.stop()
        raise
    engine.stop()


def by_table(events: list[CapturedEvent]) -> dict[str, list[CapturedEvent]]:
    found: dict[str, list[CapturedEvent]] = {}
    for event in events:
        found.setdefault(event.destination.rsplit(".", 1)[-1], []).append(event)
    return found


def kinds(events: list[CapturedEvent]) -> Counter[str]:
    return Counter("tombstone" if e.value is None else json.loads(e.value)["op"] for e in events)


def assert_ran(run: CliRun) -> None:
    assert run.returncode == 0 and not run.named("ingest_failed"), run.describe()


@pytest.mark.slow
def test_schemaless_debezium_into_a_created_and_a_declared_table(
    source_db: PostgresSource,
    catalog: Catalog,
    catalog_dsn: str,
    kafka: KafkaTestHelper,
    *,
    connect_worker: LocalConnect,
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    name = engine_name()
    topics = {table: f"{name}_lake.public.{table}" for table in ("items", "customers")}
    for topic in topics.values():
        create_topic(kafka.bootstrap_servers, topic, 2)
    create_cdc_table(
        catalog,
        "shop.items",
        pa.schema([pa.field(c, t) for c, t in LAKE_TYPES.items()]),
        primary_key=["id"],
        hash_buckets=2,
    )
    config: dict[str, Any] = {
        "job": "schemaless",
        "catalog": {"dsn": catalog_dsn, "warehouse": catalog.warehouse},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers},
        "source": {"pattern": rf"{name}_lake\.public\..*"},
        "tables": {"namespaces": {"public": "shop"}, "hash_buckets": 2},
        "checkpoint": str(tmp_path / "checkpoint"),
    }
    yaml_path = tmp_path / "ingest.yaml"

    with psycopg.connect(source_db.dsn, autocommit=True) as conn:
        items, customers = SourceTable(conn, random.Random(14)), Customers(conn, random.Random(2))
        items.create()
        conn.execute(CUSTOMERS_DDL)
        for i in range(1, 13):
            items.insert(i)
        items.update(2, **dict.fromkeys(COLUMNS[2:]))
        for i in range(1, 15):
            customers.insert(i, op="r")
        items.new_round()

        # round 1: the snapshot and streamed changes of both tables
        with capturing(connect_worker, source_db, name) as engine:
            items.snapshot_expected()
            engine.wait_for(items.total + customers.total, timeout=90)
            first_round(items, conn)
            for i in (3, 4, 5):
                customers.update(i)
            customers.delete(6)
            customers.delete(7)
            customers.insert(100)
            customers.insert(101)
            events = by_table(engine.wait_for(items.total + customers.total))
        assert kinds(events["items"]) == items.expected
        assert kinds(events["customers"]) == customers.expected
        assert set(json.loads(events["items"][0].value or b"")) >= {"op", "after"}  # no schema

        # run 1: items only, into the table created first with the Python API
        kafka.produce(topics["items"], [(e.key, e.value) for e in events["items"]])
        first = run_ingest_in_process(config, yaml_path, spark, catalog)  # raises if it fails
        assert first.named("table_created_from_stream") == []
        assert {e["passes"] for e in first.named("batch_committed")} == {1}
        assert_equal(items.rows(), lake_rows(catalog, "shop.items", ("doc",)))
        assert data_types(catalog, "shop.items") == LAKE_TYPES
        items_version = catalog.load_table("shop.items").current_version()
        progress = catalog.writer_progress("schemaless")
        assert progress is not None
        offsets_after_first = progress.source_offsets
        items_after_first = items.rows()

        # run 2: customers with a wrong declaration (name is text), and more items changes
        items.new_round()
        second_round(items, conn)
        with capturing(connect_worker, source_db, name) as engine:
            more = by_table(engine.wait_for(items.total))
        kafka.produce(topics["customers"], [(e.key, e.value) for e in events["customers"]])
        kafka.produce(topics["items"], [(e.key, e.value) for e in more["items"]])
        wrong = {**DECLARED, "columns": {**DECLARED["columns"], "name": "int64"}}
        config["tables"]["declare"] = {"shop.customers": wrong}
        refused = run_ingest_cli(config, yaml_path)
        assert refused.returncode == 1, refused.describe()
        (line,) = refused.named("ingest_failed")
        assert line["kind"] == "TooManyDeadLetters"
        assert f"topic {topics['customers']!r}: 19 of 23 records" in line["error"]
        assert "commonest reason type_mismatch" in line["error"]
        assert "column 'name'" in line["error"] and "tables.declare" in line["error"]
        assert [e for e in refused.events if e.get("level") == "error"] == [line]
        assert "Traceback" not in "\n".join(refused.other), refused.describe()
        assert not catalog.table_exists("shop.customers")
        assert catalog.load_table("shop.items").current_version() == items_version
        assert_equal(items_after_first, lake_rows(catalog, "shop.items", ("doc",)))
        assert catalog.load_table(DLQ).scan().to_arrow().num_rows == 0
        progress = catalog.writer_progress("schemaless")
        assert progress is not None and progress.source_offsets == offsets_after_first

        # run 3: the declaration fixed, the refused batch is read again and lands
        config["tables"]["declare"] = {"shop.customers": DECLARED}
        fixed = run_ingest_cli(config, yaml_path)
        assert_ran(fixed)
        created = [e["table"] for e in fixed.named("table_created_from_stream")]
        assert created == ["shop.customers"]
        assert_equal(items.rows(), lake_rows(catalog, "shop.items", ("doc",)))
        assert_equal(customers.rows(), lake_rows(catalog, "shop.customers"))
        assert data_types(catalog, "shop.customers") == CUSTOMER_TYPES
        assert catalog.load_table(DLQ).scan().to_arrow().num_rows == 0

    progress = catalog.writer_progress("schemaless")
    assert progress is not None
    produced = len(events["items"]) + len(events["customers"]) + len(more["items"])
    assert sum(sum(p.values()) for p in progress.source_offsets.values()) == produced
