"""The Spark reader's pure parts, without a Spark session: options, types, filters, splits.

They live beside the integration tests because they need pyspark's filter and type classes.
"""

from __future__ import annotations

import datetime as dt
import decimal
import pickle
import uuid
import zoneinfo

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (
    CaseInsensitiveDict,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    Not,
    StringStartsWith,
)
from pyspark.sql.types import (
    ArrayType,
    DecimalType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from catalog.files.pruning import Predicate
from catalog.model import DataFile
from ingest.spark_read.errors import ColumnReadError, ReadOptionError, UnsupportedTypeError
from ingest.spark_read.filters import ColumnRef, exact_value, split_filters, to_predicate
from ingest.spark_read.options import DEFAULT_MAX_SPLIT_BYTES, parse_options
from ingest.spark_read.planning import split_files
from ingest.spark_read.read import conform
from ingest.spark_read.source import LakestreamDataSource, PinnedTable, column_refs
from ingest.spark_read.types import spark_schema

pytestmark = pytest.mark.integration

DSN = "postgresql://reader:s3cret@db/lakestream"

# -- options ----------------------------------------------------------------------------------


def test_options_are_case_insensitive_and_default_to_the_latest_version():
    options = parse_options({"TABLE": "shop.orders", "Catalog": DSN})
    assert (options.table, options.version, options.as_of) == ("shop.orders", None, None)
    assert options.dsn.get_secret_value() == DSN
    assert options.max_split_bytes == DEFAULT_MAX_SPLIT_BYTES
    assert "s3cret" not in repr(options)


def test_options_take_the_table_from_load_path():
    options = parse_options({"path": "shop.orders", "versionasof": "7", "catalog": DSN})
    assert (options.table, options.version) == ("shop.orders", 7)
    assert options.dsn.get_secret_value() == DSN


def test_timestamp_without_offset_is_utc():
    options = parse_options(
        {"table": "a.b", "catalog": DSN, "timestampAsOf": "2026-11-22T10:15:00"}
    )
    assert options.as_of == dt.datetime(2026, 11, 22, 10, 15, tzinfo=dt.UTC)
    paris = parse_options(
        {"table": "a.b", "catalog": DSN, "timestampAsOf": "2026-11-22T10:15:00+01:00"}
    )
    assert paris.as_of == dt.datetime(2026, 11, 22, 9, 15, tzinfo=dt.UTC)


def test_the_catalog_schema_comes_from_the_option_and_is_checked():
    given = {"table": "a.b", "catalog": DSN}
    assert parse_options(given).catalog_schema == "lakestream"
    assert parse_options({**given, "catalogschema": "lake_c"}).catalog_schema == "lake_c"
    with pytest.raises(ReadOptionError, match="catalogSchema"):
        parse_options({**given, "catalogSchema": "Lake-C"})


@pytest.mark.parametrize(
    ("options", "option", "message"),
    [
        ({"catalog": DSN}, "table", "required"),
        ({"table": "a.b"}, "catalog", "required: the catalog"),
        ({"table": "a.b", "path": "c.d", "catalog": DSN}, "table", "another table"),
        ({"table": "a.b", "catalog": DSN, "versionAsOf": "x"}, "versionAsOf", "not a table"),
        ({"table": "a.b", "catalog": DSN, "versionAsOf": "-1"}, "versionAsOf", "start at 0"),
        ({"table": "a.b", "catalog": DSN, "timestampAsOf": "yesterday"}, "timestampAsOf", "ISO"),
        (
            {"table": "a.b", "catalog": DSN, "versionAsOf": "1", "timestampAsOf": "2026-01-01"},
            "versionAsOf",
            "not both",
        ),
        ({"table": "a.b", "catalog": DSN, "maxSplitBytes": "0"}, "maxSplitBytes", "positive"),
        ({"table": "a.b", "catalog": DSN, "versionAsof ": "1"}, "versionAsof ", "unknown"),
        ({"table": "a.b", "catalog": DSN, "catalogSchema": "a;b"}, "catalogSchema", "schema"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options, option, message):
    with pytest.raises(ReadOptionError, match=message) as caught:
        parse_options(options)
    assert caught.value.option == option
    assert "s3cret" not in str(caught.value)


# -- types ------------------------------------------------------------------------------------


def test_arrow_types_map_to_the_spark_types_holding_all_their_values():
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("small", pa.uint8()),
            ("huge", pa.uint64()),
            ("name", pa.large_string()),
            ("at", pa.timestamp("ms", "Europe/Paris")),
            ("wall", pa.timestamp("us")),
            ("tags", pa.list_(pa.field("item", pa.string(), nullable=False))),
            ("attrs", pa.map_(pa.string(), pa.int64())),
            ("point", pa.struct([("x", pa.int64())])),
            ("code", pa.dictionary(pa.int32(), pa.string())),
        ]
    )
    assert spark_schema(schema) == StructType(
        [
            StructField("id", LongType(), nullable=False),
            StructField("small", ShortType()),
            StructField("huge", DecimalType(20, 0)),
            StructField("name", StringType()),
            StructField("at", TimestampType()),
            StructField("wall", TimestampNTZType()),
            StructField("tags", ArrayType(StringType(), containsNull=False)),
            StructField("attrs", MapType(StringType(), LongType(), valueContainsNull=True)),
            StructField("point", StructType([StructField("x", LongType())])),
            StructField("code", StringType()),
        ]
    )


@pytest.mark.parametrize(
    ("arrow_type", "column"),
    [
        (pa.duration("us"), "c"),
        (pa.decimal256(40, 2), "c"),
        (pa.list_(pa.month_day_nano_interval()), "c[]"),
        (pa.struct([("d", pa.duration("s"))]), "c.d"),
    ],
)
def test_types_without_a_faithful_spark_type_are_refused_naming_the_column(arrow_type, column):
    with pytest.raises(UnsupportedTypeError, match="Spark cannot read") as caught:
        spark_schema(pa.schema([("c", arrow_type)]))
    assert caught.value.column == column


def test_batches_are_conformed_to_spark_types_and_never_rounded():
    output = pa.schema([("huge", pa.decimal128(20, 0)), ("at", pa.timestamp("us", "UTC"))])
    utc = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    batch = pa.record_batch(
        [pa.array([2**64 - 1], pa.uint64()), pa.array([utc], pa.timestamp("ns", "Europe/Paris"))],
        names=["huge", "at"],
    )
    conformed = conform(batch, output)
    assert conformed.schema.equals(output)
    assert conformed.to_pylist() == [{"huge": decimal.Decimal(2**64 - 1), "at": utc}]
    nanos = pa.record_batch(
        [pa.array([1], pa.uint64()), pa.array([1], pa.timestamp("ns", "UTC"))], names=["h", "a"]
    )
    with pytest.raises(ColumnReadError) as caught:
        conform(nanos, output)
    assert caught.value.column == "at"


# -- filters ----------------------------------------------------------------------------------

PARIS = zoneinfo.ZoneInfo("Europe/Paris")
COLUMNS = {
    "id": ColumnRef("id", pa.int64()),
    "Region": ColumnRef("region", pa.string()),
    "total": ColumnRef("total", pa.float64()),
    "price": ColumnRef("price", pa.decimal128(10, 2)),
    "at": ColumnRef("at", pa.timestamp("ms", "Europe/Paris")),
    "wall": ColumnRef("wall", pa.timestamp("us")),
    "day": ColumnRef("day", pa.date32()),
    "tags": ColumnRef("tags", pa.list_(pa.string())),
}
UTC_NOON = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("spark_filter", "expected"),
    [
        (EqualTo(("id",), 5), Predicate("id", "=", 5)),
        (EqualNullSafe(("id",), 5), Predicate("id", "=", 5)),
        (EqualNullSafe(("id",), None), Predicate("id", "is_null")),
        (GreaterThan(("Region",), "eu"), Predicate("region", ">", "eu")),
        (In(("id",), [1, None, 3]), Predicate("id", "in", (1, 3))),
        (IsNull(("Region",)), Predicate("region", "is_null")),
        (IsNotNull(("total",)), Predicate("total", "is_not_null")),
        (Not(IsNull(("id",))), Predicate("id", "is_not_null")),
        (Not(EqualTo(("id",), 5)), Predicate("id", "!=", 5)),
        (
            LessThan(("price",), decimal.Decimal("1.50")),
            Predicate("price", "<", decimal.Decimal("1.5")),
        ),
        (
            GreaterThanOrEqual(("day",), dt.date(2026, 1, 1)),
            Predicate("day", ">=", dt.date(2026, 1, 1)),
        ),
        (EqualTo(("at",), UTC_NOON), Predicate("at", "=", UTC_NOON.astimezone(PARIS))),
        (
            EqualTo(("wall",), dt.datetime(2026, 1, 1)),
            Predicate("wall", "=", dt.datetime(2026, 1, 1)),
        ),
        # left to Spark: not the same meaning, or nothing the catalog can prune by
        (GreaterThan(("total",), 1.0), None),  # NaN orders above numbers in Spark only
        (EqualTo(("id",), 2**63), None),  # does not fit the column
        (EqualTo(("id",), True), None),
        (EqualTo(("day",), dt.datetime(2026, 1, 1, 5)), None),
        (EqualTo(("at",), UTC_NOON.replace(microsecond=1)), None),  # finer than milliseconds
        (EqualTo(("at",), dt.datetime(2026, 1, 1)), None),  # a wall-clock time is no instant
        (EqualTo(("wall",), UTC_NOON), None),
        (EqualTo(("tags",), ["a"]), None),
        (EqualTo(("point", "x"), 1), None),  # nested path
        (EqualTo(("unknown",), 1), None),
        (In(("id",), [1, 1.5]), None),
        (Not(In(("id",), [1])), None),
        (Not(EqualNullSafe(("id",), 1)), None),  # keeps nulls, unlike <>
        (StringStartsWith(("Region",), "e"), None),
    ],
)
def test_spark_filters_become_predicates_only_when_they_mean_the_same(spark_filter, expected):
    assert to_predicate(spark_filter, COLUMNS) == expected


def test_split_filters_returns_what_spark_must_still_evaluate_by_reference():
    pushed_filter, kept_filter = EqualTo(("id",), 5), GreaterThan(("total",), 1.0)
    filters: list[Filter] = [pushed_filter, kept_filter]
    predicates, left = split_filters(filters, COLUMNS)
    assert predicates == [Predicate("id", "=", 5)]
    assert len(left) == 1 and left[0] is kept_filter


def test_exact_value_keeps_instants_and_refuses_lossy_conversions():
    assert exact_value(UTC_NOON, pa.timestamp("ns", "UTC")) == UTC_NOON
    assert exact_value(decimal.Decimal("1.505"), pa.decimal128(10, 2)) is None
    assert exact_value(7, pa.decimal128(10, 2)) == decimal.Decimal("7.00")
    assert exact_value(bytearray(b"ab"), pa.binary()) == b"ab"
    assert exact_value(1.0, pa.int64()) is None


# -- splits -----------------------------------------------------------------------------------


def _file(name: str, size: int) -> DataFile:
    return DataFile(path=f"{name}.parquet", size_bytes=size, row_count=1)


def test_plain_files_are_grouped_in_order_up_to_the_split_size():
    files = [_file("a", 60), _file("b", 50), _file("c", 200), _file("d", 10), _file("e", 30)]
    groups = split_files(files, max_bytes=100)
    assert [[f.path[0] for f in group] for group in groups] == [["a"], ["b"], ["c"], ["d", "e"]]
    assert split_files([], max_bytes=100) == []


# -- the reader Spark ships to the executors --------------------------------------------------


def test_nothing_shipped_to_executors_carries_the_dsn():
    """Spark pickles the reader and the data source into the executors' read function."""
    table_schema = pa.schema([("id", pa.int64()), ("region", pa.string())])
    source = LakestreamDataSource(CaseInsensitiveDict({"table": "shop.orders", "Catalog": DSN}))
    source._pinned = PinnedTable("shop.orders", uuid.uuid4(), 3, table_schema)  # as load() left it
    reader = source.reader(StructType([StructField("ID", LongType())]))
    assert reader._columns == {"ID": ColumnRef("id", pa.int64())}
    shipped = pickle.dumps((source, reader))
    assert b"s3cret" not in shipped
    with pytest.raises(RuntimeError, match="driver"):
        pickle.loads(shipped)[1].partitions()


def test_a_given_schema_must_name_table_columns():
    table_schema = pa.schema([("id", pa.int64())])
    with pytest.raises(ReadOptionError, match="'nope' is not in the table"):
        column_refs(StructType([StructField("nope", LongType())]), table_schema)
