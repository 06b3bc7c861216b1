"""``spark.read.format("lakestream")`` against a real catalog, real files and real local Spark.

Every test writes rows through the Python table API and checks that Spark returns exactly what
``table.scan(...).to_arrow()`` returns (as sets of rows), and, for filters, that the partitions
the filter excludes never became Spark tasks.
"""

from __future__ import annotations

import datetime as dt
import decimal

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from catalog import Catalog, Table
from ingest.spark_read import SOURCE_NAME, register
from jobs.localpg import LocalPostgres
from tests.fixtures.reference_resolver import resolve
from tests.fixtures.vectors import mark_rows

pytestmark = [pytest.mark.integration, pytest.mark.spark]

EVENTS = pa.schema(
    [
        ("id", pa.int64()),
        ("region", pa.string()),
        ("total", pa.float64()),
        ("at", pa.timestamp("us", "UTC")),
    ]
)
ORDERS = pa.schema([("id", pa.int64()), ("region", pa.string()), ("total", pa.float64())])
T0 = dt.datetime(2026, 11, 22, 8, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def lakestream(spark: SparkSession) -> SparkSession:
    """The shared session (tests/fixtures/spark.py) with the reader registered."""
    register(spark)
    return spark


def read(session: SparkSession, dsn: str, table: str, **options: object) -> DataFrame:
    reader = session.read.format(SOURCE_NAME).option("table", table).option("catalog", dsn)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def as_set(table: pa.Table) -> set[tuple[object, ...]]:
    return {tuple(row.values()) for row in table.to_pylist()}


def spark_rows(frame: DataFrame) -> set[tuple[object, ...]]:
    """Rows as Arrow gives them (time zone-aware instants, whatever the local zone)."""
    return as_set(frame.toArrow())


def spark_filters(frame: DataFrame) -> bool:
    """Whether Spark's physical plan still filters rows after the scan."""
    return " Filter " in frame._jdf.queryExecution().executedPlan().toString()


def events(*records: tuple[object, ...]) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(EVENTS.names, r, strict=True)) for r in records], schema=EVENTS
    )


def orders(*records: tuple[object, ...]) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(ORDERS.names, r, strict=True)) for r in records], schema=ORDERS
    )


def keys(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


def minutes(n: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=n)


@pytest.fixture
def event_log(catalog: Catalog) -> Table:
    """An append table with range partitions eu, us, '' and null; eu holds two files."""
    table = catalog.create_table("logs.events", EVENTS, partition_by=["region"])
    table.append(
        events((1, "eu", 1.0, minutes(1)), (2, "us", 2.0, minutes(2)), (3, None, 3.0, None))
    )
    table.append(events((4, "eu", 4.0, minutes(4)), (5, "", 5.0, minutes(5))))
    return table


@pytest.fixture
def order_book(catalog: Catalog) -> Table:
    """A CDC table whose two buckets each hold several runs, with updates and deletes."""
    table = catalog.create_table("shop.orders", ORDERS, primary_key=["id"], hash_buckets=2)
    table.upsert(orders(*((i, "eu" if i % 2 else "us", 10.0 * i) for i in range(1, 9))))  # v1
    table.upsert(orders((2, "us", 21.0), (3, "eu", 31.0), (9, "us", 90.0)))  # v2
    table.delete(keys(1, 9, 42))  # v3
    table.upsert(orders((1, "eu", 11.0), (4, "us", 41.0)))  # v4: 1 is back
    return table


# -- whole tables -------------------------------------------------------------------------------


def test_append_table_reads_every_partition_like_the_python_api(
    lakestream: SparkSession, catalog_dsn: str, event_log: Table
):
    frame = read(lakestream, catalog_dsn, "logs.events")
    assert frame.schema == StructType(
        [
            StructField("id", LongType()),
            StructField("region", StringType()),
            StructField("total", DoubleType()),
            StructField("at", TimestampType()),
        ]
    )
    expected = event_log.scan().to_arrow()
    assert spark_rows(frame) == as_set(expected) and len(expected) == 5
    assert (None, 3.0) in {(r.region, r.total) for r in frame.collect()}  # the null partition
    assert frame.rdd.getNumPartitions() == 4  # eu (2 small files, one task), us, '', null


def test_cdc_buckets_are_merged_whole_on_executors(
    lakestream: SparkSession, catalog_dsn: str, order_book: Table
):
    plan = order_book.plan()
    assert len(plan.partitions) == 2 and all(len(p.files) > 1 and p.merge for p in plan.partitions)
    frame = read(lakestream, catalog_dsn, "shop.orders")
    expected = order_book.scan().to_arrow()
    assert spark_rows(frame) == as_set(expected)
    assert {r[0] for r in as_set(expected)} == {1, 2, 3, 4, 5, 6, 7, 8}
    assert (1, "eu", 11.0) in spark_rows(frame) and frame.count() == 8
    assert frame.rdd.getNumPartitions() == 2  # one task per bucket, however many runs


def test_sequence_column_decides_which_change_of_a_key_wins(
    lakestream: SparkSession, catalog: Catalog, catalog_dsn: str
):
    schema = pa.schema([("id", pa.int64()), ("seq", pa.int64()), ("v", pa.string())])
    table = catalog.create_table(
        "shop.items",
        schema,
        primary_key=["id"],
        hash_buckets=1,
        properties={"sequence-column": "seq"},
    )
    table.upsert(pa.table({"id": [1, 2], "seq": [5, 1], "v": ["new", "old"]}, schema=schema))
    table.upsert(pa.table({"id": [1, 2], "seq": [3, 2], "v": ["late", "newer"]}, schema=schema))
    frame = read(lakestream, catalog_dsn, "shop.items")
    assert spark_rows(frame) == as_set(table.scan().to_arrow()) == {(1, 5, "new"), (2, 2, "newer")}


def test_plain_partitions_split_into_file_groups_of_bounded_size(
    lakestream: SparkSession, catalog_dsn: str, event_log: Table
):
    event_log.append(events((6, "eu", 6.0, minutes(6))))
    files = len(event_log.plan().files)
    frame = read(lakestream, catalog_dsn, "logs.events", maxSplitBytes=1)
    assert frame.rdd.getNumPartitions() == files == 6
    assert spark_rows(frame) == as_set(event_log.scan().to_arrow())


def test_marked_rows_are_left_out_by_every_task(
    lakestream: SparkSession, catalog_dsn: str, event_log: Table, order_book: Table
):
    """Plain file groups and merged buckets alike: each task loads its files' vectors (inline,
    or from the vector file through the shipped storage options) and masks before filtering."""
    before = event_log.current_version()
    mark_rows(event_log, {1, 5})  # inline
    mark_rows(event_log, {2}, inline_max=0)  # in a vector file
    mark_rows(order_book, {41.0, 80.0}, column="total")  # key 4's newest change; key 8

    plain = read(lakestream, catalog_dsn, "logs.events", maxSplitBytes=1)
    filtered = read(lakestream, catalog_dsn, "logs.events").where("total > 1.0").select("id")
    merged = read(lakestream, catalog_dsn, "shop.orders")
    past = read(lakestream, catalog_dsn, "logs.events", versionAsOf=before)

    assert {r[0] for r in spark_rows(plain)} == {3, 4}
    assert spark_rows(plain) == as_set(event_log.scan().to_arrow())
    assert {r.id for r in filtered.collect()} == {3, 4}
    assert spark_rows(merged) == as_set(order_book.scan().to_arrow())
    assert (4, "us", 40.0) in spark_rows(merged) and 8 not in {r.id for r in merged.collect()}
    assert past.count() == 5


def test_resolved_buckets_split_into_file_groups_with_or_without_a_tail(
    lakestream: SparkSession, catalog_dsn: str, order_book: Table
):
    """Resolved (design D6): each bucket's files are plain file groups, several tasks per
    bucket, each masking by its files' vectors; with a pending run after the resolved prefix,
    the groups stay, each task merging the tail against its files."""
    resolve(order_book)
    buckets = order_book.plan().partitions
    files = sum(len(p.files) for p in buckets)
    assert not any(p.merge for p in buckets) and files > len(buckets)

    resolved = read(lakestream, catalog_dsn, "shop.orders", maxSplitBytes=1)
    filtered = read(lakestream, catalog_dsn, "shop.orders", maxSplitBytes=1).where("total > 30")

    assert resolved.rdd.getNumPartitions() == files
    assert spark_rows(resolved) == as_set(order_book.scan().to_arrow())
    assert {r.id for r in filtered.collect()} == {3, 4, 5, 6, 7, 8}
    order_book.upsert(orders((3, "eu", 32.0), (10, "us", 100.0)))
    tail = read(lakestream, catalog_dsn, "shop.orders", maxSplitBytes=1)
    parts = order_book.plan().partitions
    assert any(p.merge for p in parts)

    # a bucket with a tail: one task per resolved file too, the first emitting the tail's rows
    assert tail.rdd.getNumPartitions() == sum(
        p.resolved_count if p.merge else len(p.files) for p in parts
    )
    assert spark_rows(tail) == as_set(order_book.scan().to_arrow())
    assert {(r.id, r.total) for r in tail.collect()} >= {(3, 32.0), (10, 100.0), (2, 21.0)}


def test_empty_table_reads_no_rows(lakestream: SparkSession, catalog: Catalog, catalog_dsn: str):
    catalog.create_table("logs.empty", EVENTS)
    frame = read(lakestream, catalog_dsn, "logs.empty")
    assert frame.count() == 0 and frame.columns == EVENTS.names


# -- time travel --------------------------------------------------------------------------------


def test_version_and_timestamp_as_of_read_past_versions(
    lakestream: SparkSession, catalog_dsn: str, order_book: Table
):
    for version in (1, 3):
        frame = read(lakestream, catalog_dsn, "shop.orders", versionAsOf=version)
        assert spark_rows(frame) == as_set(order_book.scan(version=version).to_arrow())
    committed = {v.version: v.committed_at for v in order_book.history()}
    at = committed[2] + (committed[3] - committed[2]) / 2
    frame = read(lakestream, catalog_dsn, "shop.orders", timestampAsOf=at.isoformat())
    assert spark_rows(frame) == as_set(order_book.scan(version=2).to_arrow())
    before = (committed[1] - dt.timedelta(hours=1)).isoformat()
    assert read(lakestream, catalog_dsn, "shop.orders", timestampAsOf=before).count() == 0


def test_a_dataframe_keeps_reading_the_version_it_was_loaded_at(
    lakestream: SparkSession, catalog_dsn: str, order_book: Table
):
    loaded = read(lakestream, catalog_dsn, "shop.orders")
    before = as_set(order_book.scan().to_arrow())
    order_book.upsert(orders((100, "eu", 1.0)))
    assert spark_rows(loaded) == before
    assert (100, "eu", 1.0) in spark_rows(read(lakestream, catalog_dsn, "shop.orders"))


# -- filters ------------------------------------------------------------------------------------


def test_partition_filters_prune_partitions_before_any_task(
    lakestream: SparkSession, catalog_dsn: str, event_log: Table
):
    frame = read(lakestream, catalog_dsn, "logs.events")
    eu = frame.filter("region = 'eu'")
    assert eu.rdd.getNumPartitions() == 1
    assert spark_rows(eu) == as_set(event_log.scan(filter=[("region", "=", "eu")]).to_arrow())
    nulls = frame.filter("region is null")
    assert nulls.rdd.getNumPartitions() == 1 and spark_rows(nulls) == {(3, None, 3.0, None)}
    some = frame.filter("region in ('us', '') and id >= 2")
    assert some.rdd.getNumPartitions() == 2
    assert {r.id for r in some.collect()} == {2, 5}


def test_key_filters_prune_buckets_and_value_filters_apply_after_the_merge(
    lakestream: SparkSession, catalog_dsn: str, order_book: Table
):
    frame = read(lakestream, catalog_dsn, "shop.orders")
    one = frame.filter("id = 2")
    assert one.rdd.getNumPartitions() == 1 and spark_rows(one) == {(2, "us", 21.0)}
    # key 3 was 30.0 in an older run: a value filter must not bring that version back
    old_total = frame.filter("region = 'eu' and id <= 3")
    expected = order_book.scan(filter=[("region", "=", "eu"), ("id", "<=", 3)]).to_arrow()
    assert spark_rows(old_total) == as_set(expected) == {(1, "eu", 11.0), (3, "eu", 31.0)}
    assert frame.filter("total = 30.0").count() == 0  # left to Spark (a float), same answer


def test_filters_the_reader_cannot_apply_are_left_to_spark(
    lakestream: SparkSession, catalog_dsn: str, event_log: Table
):
    frame = read(lakestream, catalog_dsn, "logs.events")
    like = frame.filter("region like 'e%' and total > 1.5")
    # LIKE stays with Spark; only the IS NOT NULL Spark infers from it prunes (the null partition)
    assert like.rdd.getNumPartitions() == 3
    assert {r.id for r in like.collect()} == {4}
    either = frame.filter("region = 'eu' or id = 2")  # a disjunction is never pushed
    assert {r.id for r in either.collect()} == {1, 2, 4}
    instants = frame.filter(f"at >= timestamp'{minutes(4).isoformat()}'")
    assert {r.id for r in instants.collect()} == {4, 5}
    assert spark_filters(like) and not spark_filters(instants)  # pushed whole: no second pass


# -- types and errors ---------------------------------------------------------------------------


def test_column_types_arrive_as_their_spark_types(
    lakestream: SparkSession, catalog: Catalog, catalog_dsn: str, request: pytest.FixtureRequest
):
    schema = pa.schema(
        [
            pa.field("id", pa.int32(), nullable=False),
            ("tiny", pa.int8()),
            ("unsigned", pa.uint32()),
            ("ratio", pa.float32()),
            ("price", pa.decimal128(12, 3)),
            ("name", pa.large_string()),
            ("blob", pa.binary()),
            ("flag", pa.bool_()),
            ("day", pa.date32()),
            ("wall", pa.timestamp("ms")),
            ("clock", pa.time64("us")),
            ("tags", pa.list_(pa.string())),
            ("point", pa.struct([("x", pa.int64()), ("label", pa.string())])),
        ]
    )
    row = {
        "id": 1,
        "tiny": -3,
        "unsigned": 2**32 - 1,
        "ratio": 0.5,
        "price": decimal.Decimal("12.345"),
        "name": "ü",
        "blob": b"\x00\x01",
        "flag": True,
        "day": dt.date(2026, 11, 22),
        "wall": dt.datetime(2026, 11, 22, 10, 15, 0, 123000),
        "clock": dt.time(10, 15, 0, 5),
        "tags": ["a", None],
        "point": {"x": 7, "label": "p"},
    }
    lakestream.conf.set("spark.sql.timeType.enabled", "true")  # TIME is a preview in Spark 4
    request.addfinalizer(lambda: lakestream.conf.unset("spark.sql.timeType.enabled"))
    table = catalog.create_table("shop.typed", schema)
    table.append(pa.Table.from_pylist([row, {"id": 2}], schema=schema))
    frame = read(lakestream, catalog_dsn, "shop.typed")
    assert frame.schema.simpleString() == (
        "struct<id:int,tiny:tinyint,unsigned:bigint,ratio:float,price:decimal(12,3),"
        "name:string,blob:binary,flag:boolean,day:date,wall:timestamp_ntz,clock:time(6),tags:array<string>,"
        "point:struct<x:bigint,label:string>>"
    )
    collected = sorted(frame.toArrow().to_pylist(), key=lambda r: r["id"])
    assert collected == sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert collected[0] == row
    assert (
        frame.filter("price = 12.345 and wall = timestamp_ntz'2026-11-22 10:15:00.123'").count()
        == 1
    )


def test_a_column_spark_cannot_hold_is_refused_at_load(
    lakestream: SparkSession, catalog: Catalog, catalog_dsn: str
):
    catalog.create_table("logs.spans", pa.schema([("id", pa.int64()), ("took", pa.duration("ms"))]))
    with pytest.raises(Exception, match=r"column 'took' has type duration\[ms\]"):
        read(lakestream, catalog_dsn, "logs.spans")


def test_a_given_schema_reads_only_its_columns(
    lakestream: SparkSession, catalog_dsn: str, event_log: Table
):
    frame = (
        lakestream.read.format(SOURCE_NAME)
        .schema("ID bigint, total double")
        .option("table", "logs.events")
        .option("catalog", catalog_dsn)
        .load()
    )
    assert frame.columns == ["ID", "total"]
    assert spark_rows(frame.filter("ID > 3")) == {(4, 4.0), (5, 5.0)}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"table": "shop.nothing"}, "'shop.nothing' does not exist"),
        ({"table": "shop.orders", "versionAsOf": 99}, "versions 0..4, not 99"),
        ({"table": "shop.orders", "versionAsOf": 1, "timestampAsOf": "2026-01-01"}, "not both"),
        ({"table": "shop.orders", "timestampAsOf": "last tuesday"}, "not an ISO-8601 time"),
        ({"table": "shop.orders", "versionasof": 1, "snapshot": 3}, "'snapshot': unknown option"),
    ],
)
def test_bad_options_fail_at_load_with_a_clear_message(
    lakestream: SparkSession,
    catalog_dsn: str,
    order_book: Table,
    options: dict[str, object],
    message: str,
):
    reader = lakestream.read.format(SOURCE_NAME).option("catalog", catalog_dsn)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    with pytest.raises(Exception, match=message) as caught:
        reader.load()
    assert catalog_dsn not in str(caught.value)


def test_executors_read_without_the_catalog(
    lakestream: SparkSession, catalog_dsn: str, pg_server: LocalPostgres, event_log: Table
):
    """Planned on the driver, the tasks still run after the catalog database is gone."""
    expected = as_set(event_log.scan(columns=["id", "region", "total"]).to_arrow())
    frame = read(lakestream, catalog_dsn, "logs.events")
    rdd = frame.rdd  # plans: partitions() ran
    assert rdd.getNumPartitions() == 4
    assert catalog_dsn not in frame._jdf.queryExecution().toString()  # nor in any plan
    dbname = conninfo_to_dict(catalog_dsn)["dbname"]
    with psycopg.connect(pg_server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(dbname)))
    assert {(r.id, r.region, r.total) for r in rdd.collect()} == expected


def test_internal_columns_are_hidden_unless_the_schema_names_them(
    lakestream: SparkSession, catalog: Catalog, catalog_dsn: str
):
    from ingest.sink.tables import create_cdc_table

    table = create_cdc_table(
        catalog,
        "shop.people",
        pa.schema([pa.field("id", pa.int64(), nullable=False)]),
        primary_key=["id"],
        hash_buckets=1,
    )
    seq = [n.to_bytes(16, "big") for n in (5, 6)]
    table.upsert(pa.table({"id": [1, 2], "_ls_seq": pa.array(seq, pa.binary(16))}))
    assert read(lakestream, catalog_dsn, "shop.people").columns == ["id"]
    named = (
        lakestream.read.format(SOURCE_NAME)
        .schema("id bigint, _ls_seq binary")
        .option("table", "shop.people")
        .option("catalog", catalog_dsn)
        .load()
    )
    assert spark_rows(named) == {(1, seq[0]), (2, seq[1])}
