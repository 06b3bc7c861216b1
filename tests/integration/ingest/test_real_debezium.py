"""Real Debezium end to end: PostgreSQL -> Debezium (pgoutput) -> broker -> ingest -> lake table.

The events are not built by hand: Debezium's PostgreSQL connector in Kafka Connect, configured
from ``docker/connector.json`` as the deployment is, captures a real source table (snapshot,
then streamed inserts, updates, deletes, primary-key changes and NULLs, with the default replica
identity) into the broker, the ingest job reads the very topic Connect wrote, and the lake table
must equal the source table value for value. A second round of changes happens while the
connector is stopped; resumed, it continues from its offsets (no second snapshot) and the lake
must follow again.

Two smaller tests pin down what real Debezium sends that hand-built events did not: the
placeholder for unchanged TOASTed values, and the connect type names of float columns.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import random
import uuid
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg.types.string import TextLoader

from catalog import Catalog
from ingest.debezium import DecoderConfig
from ingest.job import IngestJobConfig, run_ingest
from ingest.kafka.connect import LocalConnect
from jobs.localpg import LocalPostgres
from tests.fixtures.debezium import (
    CapturedEvent,
    DebeziumCapture,
    DebeziumError,
    PostgresSource,
    create_source_database,
    drop_source_database,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

DLQ = "lakestream.dead_letters"
LAKE_TABLE = "shop.items"
CREATE_TABLE = """
CREATE TABLE items (
    id     integer PRIMARY KEY,
    name   text NOT NULL,
    price  numeric(10, 2),
    made   timestamp,
    seen   timestamptz,
    day    date,
    active boolean,
    doc    jsonb,
    ref    uuid
)
"""
COLUMNS = ("id", "name", "price", "made", "seen", "day", "active", "doc", "ref")
#: What Debezium's default type mapping must become in the lake.
LAKE_TYPES = {
    "id": pa.int32(),
    "name": pa.string(),
    "price": pa.decimal128(10, 2),
    "made": pa.timestamp("us"),
    "seen": pa.timestamp("us", tz="UTC"),
    "day": pa.date32(),
    "active": pa.bool_(),
    "doc": pa.string(),
    "ref": pa.string(),
}
#: The events Debezium emits per affected row, by kind of statement (default replica identity).
EVENTS_PER_ROW = {
    "insert": ("c",),
    "update": ("u",),
    "delete": ("d", "tombstone"),
    "rekey": ("d", "tombstone", "c"),  # UPDATE ... SET id = ...: delete old key, create new
}
EPOCH = dt.datetime(1970, 1, 1)
NAMES = ("", "plain", "žluťoučký kůň 🐍", "quote ' \" \\ and, comma", "line\nbreak\ttab")
OFFSETS_MIN = (-600, -330, 0, 60, 345, 780)


class SourceTable:
    """The real source table, and a count of the Debezium events its changes must produce."""

    def __init__(self, conn: psycopg.Connection[Any], rng: random.Random) -> None:
        self.conn = conn
        self.rng = rng
        self.expected: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.expected.values())

    def create(self) -> None:
        self.conn.execute(CREATE_TABLE)

    def execute(self, kind: str, query: str, params: tuple[object, ...] = ()) -> None:
        rowcount = self.conn.execute(query, params).rowcount  # type: ignore[arg-type]
        assert rowcount > 0, f"{query} {params} changed nothing"
        for op in EVENTS_PER_ROW[kind]:
            self.expected[op] += rowcount

    def insert(self, id_: int, **values: object) -> None:
        row = {**self.random_row(id_), **values}
        columns = ", ".join(row)
        marks = ", ".join(["%s"] * len(row))
        self.execute(
            "insert", f"INSERT INTO items ({columns}) VALUES ({marks})", tuple(row.values())
        )

    def update(self, id_: int, **values: object) -> None:
        values = values or self.random_row(id_)
        values.pop("id", None)
        sets = ", ".join(f"{column} = %s" for column in values)
        self.execute("update", f"UPDATE items SET {sets} WHERE id = %s", (*values.values(), id_))

    def delete(self, id_: int) -> None:
        self.execute("delete", "DELETE FROM items WHERE id = %s", (id_,))

    def rekey(self, old: int, new: int, **values: object) -> None:
        sets = "".join(f", {column} = %s" for column in values)
        query = f"UPDATE items SET id = %s{sets} WHERE id = %s"
        self.execute("rekey", query, (new, *values.values(), old))

    def snapshot_expected(self) -> None:
        """The snapshot of an engine starting now will read every row once."""
        self.expected["r"] += self.conn.execute("SELECT count(*) FROM items").fetchone()[0]

    def new_round(self) -> None:
        self.expected.clear()

    def random_row(self, id_: int) -> dict[str, object]:
        rng = self.rng

        def maybe(value: object) -> object:
            return None if rng.random() < 0.2 else value

        def micros() -> dt.timedelta:  # 1900 to 2100, to the microsecond
            seconds = rng.randint(-2_208_988_800, 4_102_444_800)
            return dt.timedelta(seconds=seconds, microseconds=rng.randint(0, 999_999))

        offset = dt.timezone(dt.timedelta(minutes=rng.choice(OFFSETS_MIN)))
        seen = (dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + micros()).astimezone(offset)
        doc = rng.choice(
            [
                {"n": id_, "tags": ["a", "ü"], "nested": {"f": 1.5, "none": None, "ok": True}},
                [1, "two", {"three": 3}],
                "just a string",
                None,  # JSON null, not SQL NULL
                {"big": 123456789012345678901234567890, "neg": -0.001},
            ]
        )
        return {
            "id": id_,
            "name": rng.choice(NAMES) + str(id_),
            "price": maybe(Decimal(rng.randint(-9_999_999_999, 9_999_999_999)).scaleb(-2)),
            "made": maybe(EPOCH + micros()),
            "seen": maybe(seen),
            "day": maybe(dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-40_000, 40_000))),
            "active": maybe(rng.random() < 0.5),
            "doc": maybe(Jsonb(doc)),
            "ref": maybe(uuid.UUID(int=rng.getrandbits(128))),
        }

    def rows(self) -> dict[int, dict[str, object]]:
        """The table as it is now, normalised for comparison with the lake."""
        return source_rows(self.conn, "SELECT * FROM items")


def source_rows(
    conn: psycopg.Connection[Any], query: str, json_columns: tuple[str, ...] = ("doc",)
) -> dict[int, dict[str, object]]:
    """Rows by ``id``, normalised like :func:`lake_rows`: timestamptz in UTC, uuid as text,
    json parsed (read as text, so that JSON null stays apart from SQL NULL)."""
    cursor = conn.cursor(row_factory=dict_row)
    for kind in ("json", "jsonb"):
        cursor.adapters.register_loader(kind, TextLoader)
    rows = {}
    for record in cursor.execute(query).fetchall():
        row = {c: _json(v) if c in json_columns else _plain(v) for c, v in record.items()}
        rows[record["id"]] = row
    return rows


def _plain(value: object) -> object:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return str(value) if isinstance(value, uuid.UUID) else value


def _json(text: str | None) -> object:
    """JSON text as a comparable value; SQL NULL stays apart from JSON null."""
    if text is None:
        return None
    try:
        return ("json", json.loads(text))
    except ValueError:
        return ("not json", text)


def lake_rows(
    catalog: Catalog, json_columns: tuple[str, ...] = ("doc",)
) -> dict[int, dict[str, object]]:
    """The lake table's rows by ``id``, without lakestream's columns; JSON columns parsed."""
    table = catalog.load_table(LAKE_TABLE).scan().to_arrow()
    rows = {}
    for record in table.to_pylist():
        row = {k: v for k, v in record.items() if not k.startswith("_ls_")}
        for column in json_columns:
            row[column] = _json(row[column])
        rows[row["id"]] = row
    return rows


def differences(source: dict[int, dict], lake: dict[int, dict]) -> list[str]:
    found = [f"id {i}: in the source, not in the lake: {source[i]}" for i in source.keys() - lake]
    found += [f"id {i}: in the lake, not in the source: {lake[i]}" for i in lake.keys() - source]
    for i in sorted(source.keys() & lake.keys()):
        for column in source[i].keys() | lake[i].keys():
            want, got = source[i].get(column, "<no column>"), lake[i].get(column, "<no column>")
            if want != got or type(want) is not type(got):
                found.append(f"id {i} column {column}: source {_short(want)}, lake {_short(got)}")
    return found


def _short(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 120 else f"{shown[:100]}... ({len(shown)} chars)"


def assert_lake_equals_source(
    catalog: Catalog,
    want: dict[int, dict],
    types: dict[str, pa.DataType] | None = None,
    json_columns: tuple[str, ...] = ("doc",),
    *,
    dead_letters: int = 0,
) -> None:
    dead = catalog.load_table(DLQ).scan().to_arrow().to_pylist()
    assert len(dead) == dead_letters, "dead letters: " + "; ".join(
        f"offset {d['offset']}: {d['reason']}: {d['error']}" for d in dead[:5]
    )
    if types is not None:
        schema = catalog.load_table(LAKE_TABLE).schema
        assert {f.name: f.type for f in schema if not f.name.startswith("_ls_")} == types
    diffs = differences(want, lake_rows(catalog, json_columns))
    assert not diffs, f"{len(diffs)} differences:\n" + "\n".join(diffs[:40])


def event_kinds(events: list[CapturedEvent]) -> Counter[str]:
    kinds: Counter[str] = Counter()
    for event in events:
        kinds["tombstone" if event.value is None else json.loads(event.value)["payload"]["op"]] += 1
    return kinds


def capture_round(capture: DebeziumCapture, expected: Counter[str]) -> list[CapturedEvent]:
    """Wait for every expected event, stop the connector, and check nothing else came."""
    try:
        capture.wait_for(sum(expected.values()), timeout=60)
    except BaseException:
        with contextlib.suppress(DebeziumError):
            capture.stop()
        raise
    events = capture.stop()
    assert event_kinds(events) == expected, capture.log_tail()
    assert {e.destination for e in events} == {f"{capture.name}.public.items"}
    return events


def ingest_config(kafka: Any, topic: str, tmp_path: Path) -> IngestJobConfig:
    return IngestJobConfig(
        job="items-cdc",
        bootstrap_servers=kafka.bootstrap_servers,
        checkpoint=tmp_path / "checkpoint",
        dead_letter_table=DLQ,
        topics=(topic,),
        decoder=DecoderConfig(topic_tables={topic: LAKE_TABLE}),
        hash_buckets=2,
    )


def engine_name() -> str:
    """Connector name and topic prefix, the stem of the slot and publication names: unique per
    test."""
    return f"ls{uuid.uuid4().hex[:8]}"


def first_round(source: SourceTable, conn: psycopg.Connection[Any]) -> None:
    """Streamed changes after the snapshot of rows 1..12."""
    for i in range(13, 21):
        source.insert(i)
    source.update(1, name="renamed", price=None, doc=Jsonb({"updated": [1, 2]}))
    source.update(2)  # NULLs become values
    with conn.transaction():  # several changes of one row in one transaction
        source.insert(21)
        source.update(21, price=Decimal("-0.01"))
        source.update(21, name="twice")
        source.delete(3)
    source.delete(5)
    source.delete(6)
    source.rekey(7, 100)
    source.rekey(8, 101, name="moved and renamed")
    with conn.transaction():  # swap two keys through a third
        source.rekey(9, -9)
        source.rekey(10, 9)
        source.rekey(-9, 10)
    with conn.transaction():  # a key deleted and inserted anew
        source.delete(11)
        source.insert(11)
    source.execute("update", "UPDATE items SET price = -price WHERE id BETWEEN 13 AND 16")
    source.update(12, name="same")
    source.update(12, name="same")  # an update that changes nothing still comes


def second_round(source: SourceTable, conn: psycopg.Connection[Any]) -> None:
    """Changes made while the connector is stopped."""
    source.insert(200)
    source.insert(201, price=Decimal("99999999.99"), made=dt.datetime(1901, 1, 1, 0, 0, 0, 1))
    source.update(100, seen=dt.datetime(2030, 1, 1, 12, tzinfo=dt.UTC), day=dt.date(1, 1, 1))
    source.delete(101)
    source.rekey(12, 5)  # onto a key deleted in round 1
    source.execute("rekey", "UPDATE items SET id = id + 1000 WHERE id IN (13, 14)")
    source.update(15, **dict.fromkeys(COLUMNS[2:]))
    source.delete(1)
    with conn.transaction():  # born, moved and gone within one transaction
        source.insert(300)
        source.rekey(300, 301)
        source.delete(301)


@pytest.fixture
def source_db(pg_server: LocalPostgres) -> Iterator[PostgresSource]:
    """A database of its own on the session's server (started with wal_level=logical)."""
    name = create_source_database(pg_server)
    yield PostgresSource(pg_server.port, name)
    drop_source_database(pg_server, name)


@pytest.mark.slow
def test_real_debezium_changes_keep_the_lake_equal_to_the_source(
    source_db: PostgresSource,
    catalog: Catalog,
    kafka: Any,
    *,
    connect_worker: LocalConnect,
    spark: Any,
    tmp_path: Path,
) -> None:
    name = engine_name()
    topic = f"{name}.public.items"  # created by Connect, with the deployment's partitions
    config = ingest_config(kafka, topic, tmp_path)
    produced = 0

    with psycopg.connect(source_db.dsn, autocommit=True) as conn:
        source = SourceTable(conn, random.Random(20261122))
        source.create()
        for i in range(1, 13):
            source.insert(i)
        source.update(2, **dict.fromkeys(COLUMNS[2:]))  # a row of NULLs but for the key
        source.new_round()

        # round 1: the snapshot, then streamed changes
        with DebeziumCapture(connect_worker, source_db, name) as capture:
            source.snapshot_expected()
            capture.wait_for(source.total, timeout=90)  # connector start + snapshot
            first_round(source, conn)
            events = capture_round(capture, source.expected)
        assert len({e.partition for e in events}) > 1  # keyed over the topic's partitions
        produced += len(events)

        first = run_ingest(config, spark, catalog)
        assert first.batches_committed >= 1
        assert_lake_equals_source(catalog, source.rows(), LAKE_TYPES)

        # round 2: changes while the connector is stopped; it resumes from its offsets
        source.new_round()
        second_round(source, conn)
        with DebeziumCapture(connect_worker, source_db, name) as capture:
            events = capture_round(capture, source.expected)
        assert "r" not in event_kinds(events)  # no second snapshot
        produced += len(events)

        second = run_ingest(config, spark, catalog)
        assert second.incarnation == first.incarnation
        assert_lake_equals_source(catalog, source.rows(), LAKE_TYPES)

    progress = catalog.writer_progress("items-cdc")
    assert progress is not None
    assert sum(progress.source_offsets[topic].values()) == produced


def test_unchanged_toasted_values_keep_their_stored_value(
    source_db: PostgresSource,
    catalog: Catalog,
    kafka: Any,
    *,
    connect_worker: LocalConnect,
    spark: Any,
    tmp_path: Path,
) -> None:
    """With the default REPLICA IDENTITY, an UPDATE that leaves a TOASTed (large, stored out of
    line) value alone carries Debezium's placeholder ``__debezium_unavailable_value`` instead
    of the value. The change is applied as a partial row: the lake equals the source, the
    untouched large values kept from the key's previous change, in the same batch or a later
    one, and never overwritten with the placeholder."""
    rng = random.Random(5)
    big = [rng.randbytes(12_000).hex() for _ in range(3)]  # incompressible: stored out of line
    with psycopg.connect(source_db.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id integer PRIMARY KEY, v integer, note text, doc jsonb)")
        for i, text in enumerate(big[:2], start=1):
            conn.execute("INSERT INTO items VALUES (%s, 0, %s, %s)", (i, text, Jsonb({"t": text})))
        name = engine_name()
        with DebeziumCapture(connect_worker, source_db, name) as capture:
            capture.wait_for(2, timeout=90)
            conn.execute("UPDATE items SET v = 1 WHERE id = 1")  # note and doc untouched
            conn.execute("UPDATE items SET note = 'short' WHERE id = 2")  # doc untouched
            first = capture_round(capture, Counter(r=2, u=2))
        conn.execute("UPDATE items SET v = 2 WHERE id = 1")  # untouched again, next batch
        conn.execute("UPDATE items SET doc = %s WHERE id = 2", (Jsonb({"t": big[2]}),))
        config = ingest_config(kafka, f"{name}.public.items", tmp_path)
        run_ingest(config, spark, catalog)
        with DebeziumCapture(connect_worker, source_db, name) as capture:
            capture_round(capture, Counter(u=2))
        updates = [json.loads(e.value)["payload"] for e in first if e.value]
        note = next(u["after"]["note"] for u in updates if u["op"] == "u" and u["after"]["id"] == 1)
        assert note == "__debezium_unavailable_value"  # the situation is real
        run_ingest(config, spark, catalog)
        assert_lake_equals_source(catalog, source_rows(conn, "SELECT * FROM items"))
        lake = catalog.load_table(LAKE_TABLE).scan().to_arrow()
        assert "__debezium_unavailable_value" not in str(lake.to_pylist())


def test_float_columns(
    source_db: PostgresSource,
    catalog: Catalog,
    kafka: Any,
    *,
    connect_worker: LocalConnect,
    spark: Any,
    tmp_path: Path,
) -> None:
    """``real`` and ``double precision``: the JsonConverter names their connect types ``float``
    and ``double`` in the embedded schema."""
    with psycopg.connect(source_db.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id integer PRIMARY KEY, score float8, ratio real)")
        conn.execute(
            "INSERT INTO items VALUES (1, 1.5, 0.5), (2, -0.1, -2.25), (3, 1e300, 1024),"
            " (4, 'Infinity', '-Infinity'), (5, NULL, NULL)"
        )
        name = engine_name()
        with DebeziumCapture(connect_worker, source_db, name) as capture:
            capture.wait_for(5, timeout=90)
            conn.execute("UPDATE items SET score = 2.718281828459045, ratio = 0.125 WHERE id = 5")
            capture_round(capture, Counter(r=5, u=1))
        run_ingest(ingest_config(kafka, f"{name}.public.items", tmp_path), spark, catalog)
        types = {"id": pa.int32(), "score": pa.float64(), "ratio": pa.float32()}
        want = source_rows(conn, "SELECT * FROM items", json_columns=())
        assert_lake_equals_source(catalog, want, types, json_columns=())
