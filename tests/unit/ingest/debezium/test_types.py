"""Debezium logical types into Arrow types, with and without the embedded schema."""

from __future__ import annotations

import datetime as dt
from decimal import Context, Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.debezium import (
    LOGICAL_KEY,
    DeadLetterReason,
    DecoderConfig,
    decode_records,
)
from tests.fixtures.debezium_events import (
    b64,
    decimal_bytes,
    decimal_field,
    field,
    key,
    payload,
    pg_source,
    record,
    value,
    variable_decimal,
)

TABLE = "public.customers"
ID = field("id", "int32", optional=False)
UTC = dt.UTC
EXACT = Context(prec=100)
POINT_WKB = bytes.fromhex("0101000000000000000000F03F0000000000000040")  # POINT(1 2)


def decode_one(column: dict[str, Any], json_value: object, config: DecoderConfig | None = None):
    """Decode a create of (id, column) with the embedded schema; the batch and the column."""
    body = payload("c", after={"id": 1, column["field"]: json_value}, source=pg_source(100))
    message = record(value(body, [ID, column]), key({"id": 1}, [ID]))
    batch = decode_records([message], config or DecoderConfig())
    if not batch.tables:
        return batch, None
    return batch, batch.table(TABLE).rows.schema.field(column["field"])


LOGICAL_CASES = [
    pytest.param(field("c", "int8"), -128, pa.int8(), -128, id="int8"),
    pytest.param(field("c", "int16"), 32767, pa.int16(), 32767, id="int16"),
    pytest.param(field("c", "int32"), -(2**31), pa.int32(), -(2**31), id="int32"),
    pytest.param(field("c", "int64"), 2**63 - 1, pa.int64(), 2**63 - 1, id="int64"),
    pytest.param(field("c", "float"), 1.5, pa.float32(), 1.5, id="float32"),
    pytest.param(field("c", "double"), 2.25, pa.float64(), 2.25, id="float64"),
    pytest.param(field("c", "float64"), 3, pa.float64(), 3.0, id="float64-int-json"),
    pytest.param(field("c", "float64"), "Infinity", pa.float64(), float("inf"), id="float-inf"),
    pytest.param(field("c", "boolean"), True, pa.bool_(), True, id="boolean"),
    pytest.param(field("c", "string"), "héllo", pa.string(), "héllo", id="string"),
    pytest.param(field("c", "bytes"), b64(b"\x00\xffab"), pa.binary(), b"\x00\xffab", id="bytes"),
    pytest.param(
        decimal_field("c", 10, 2), decimal_bytes(12345), pa.decimal128(10, 2), Decimal("123.45"),
        id="decimal",
    ),
    pytest.param(
        decimal_field("c", 10, 2), decimal_bytes(-5), pa.decimal128(10, 2), Decimal("-0.05"),
        id="decimal-negative",
    ),
    pytest.param(
        field("c", "bytes", logical="org.apache.kafka.connect.data.Decimal",
              parameters={"scale": "4"}),
        decimal_bytes(10**37), pa.decimal128(38, 4), Decimal(10**33), id="decimal-no-precision",
    ),
    pytest.param(
        decimal_field("c", 50, 3), decimal_bytes(-(10**49) + 1), pa.decimal256(50, 3),
        Decimal(-(10**49) + 1).scaleb(-3, EXACT), id="decimal-wide",
    ),
    pytest.param(
        field("c", "struct", logical="io.debezium.data.VariableScaleDecimal",
              fields=[field("scale", "int32", optional=False), field("value", "bytes",
                                                                       optional=False)]),
        variable_decimal(123456, 3), pa.decimal128(38, 18), Decimal("123.456"),
        id="variable-scale-decimal",
    ),
    pytest.param(
        field("c", "int32", logical="io.debezium.time.Date"), 19000, pa.date32(),
        dt.date(2022, 1, 8), id="date",
    ),
    pytest.param(
        field("c", "int32", logical="org.apache.kafka.connect.data.Date"), -1, pa.date32(),
        dt.date(1969, 12, 31), id="connect-date",
    ),
    pytest.param(
        field("c", "int32", logical="io.debezium.time.Time"), 45_296_789, pa.time64("us"),
        dt.time(12, 34, 56, 789000), id="time-ms",
    ),
    pytest.param(
        field("c", "int32", logical="org.apache.kafka.connect.data.Time"), 1_000, pa.time64("us"),
        dt.time(0, 0, 1), id="connect-time",
    ),
    pytest.param(
        field("c", "int64", logical="io.debezium.time.MicroTime"), 45_296_789_012,
        pa.time64("us"), dt.time(12, 34, 56, 789012), id="micro-time",
    ),
    pytest.param(
        field("c", "int64", logical="io.debezium.time.MicroTime"), 86_400_000_000,
        pa.time64("us"), dt.time(23, 59, 59, 999999), id="micro-time-24h-saturates",
    ),
    pytest.param(
        field("c", "int64", logical="io.debezium.time.NanoTime"), 45_296_789_012_345,
        pa.time64("ns"), None, id="nano-time",
    ),
    pytest.param(
        field("c", "int64", logical="io.debezium.time.Timestamp"), 1_718_000_000_123,
        pa.timestamp("ms"), dt.datetime(2024, 6, 10, 6, 13, 20, 123000), id="timestamp-ms",
    ),
    pytest.param(
        field("c", "int64", logical="org.apache.kafka.connect.data.Timestamp"), 1_718_000_000_123,
        pa.timestamp("ms"), dt.datetime(2024, 6, 10, 6, 13, 20, 123000), id="connect-timestamp",
    ),
    pytest.param(
        field("c", "int64", logical="io.debezium.time.MicroTimestamp"), 1_718_000_000_123_456,
        pa.timestamp("us"), dt.datetime(2024, 6, 10, 6, 13, 20, 123456), id="micro-timestamp",
    ),
    pytest.param(
        field("c", "int64", logical="io.debezium.time.MicroTimestamp"), -62_135_596_800_000_000,
        pa.timestamp("us"), dt.datetime(1, 1, 1), id="micro-timestamp-year-1",
    ),
    pytest.param(
        field("c", "int64", logical="io.debezium.time.NanoTimestamp"), 1_718_000_000_123_456_789,
        pa.timestamp("ns"), None, id="nano-timestamp",
    ),
    pytest.param(
        field("c", "string", logical="io.debezium.time.ZonedTimestamp"),
        "2024-06-10T06:13:20.123456Z", pa.timestamp("us", tz="UTC"),
        dt.datetime(2024, 6, 10, 6, 13, 20, 123456, tzinfo=UTC), id="zoned-timestamp",
    ),
    pytest.param(
        field("c", "string", logical="io.debezium.time.ZonedTimestamp"),
        "2024-06-10T08:13:20+02:00", pa.timestamp("us", tz="UTC"),
        dt.datetime(2024, 6, 10, 6, 13, 20, tzinfo=UTC), id="zoned-timestamp-offset",
    ),
    pytest.param(
        field("c", "string", logical="io.debezium.time.ZonedTimestamp"),
        "2024-06-10T06:13:20.123456789Z", pa.timestamp("us", tz="UTC"),
        dt.datetime(2024, 6, 10, 6, 13, 20, 123456, tzinfo=UTC), id="zoned-timestamp-nanos",
    ),
    pytest.param(
        field("c", "string", logical="io.debezium.time.ZonedTimestamp"), "infinity",
        pa.timestamp("us", tz="UTC"), dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        id="zoned-timestamp-infinity",
    ),
    pytest.param(
        field("c", "string", logical="io.debezium.time.ZonedTime"), "06:13:20.123456Z",
        pa.string(), "06:13:20.123456Z", id="zoned-time",
    ),
    pytest.param(
        field("c", "string", logical="io.debezium.data.Uuid"),
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", pa.string(),
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", id="uuid",
    ),
    pytest.param(
        field("c", "string", logical="io.debezium.data.Json"), '{"a": [1, 2]}', pa.string(),
        '{"a": [1, 2]}', id="json",
    ),
    pytest.param(
        field("c", "string", logical="io.debezium.data.Enum",
              parameters={"allowed": "sad,ok,happy"}),
        "happy", pa.string(), "happy", id="enum",
    ),
    pytest.param(
        field("c", "string", logical="io.debezium.data.EnumSet",
              parameters={"allowed": "read,write,admin"}),
        "read,write", pa.list_(pa.string()), ["read", "write"], id="enum-set",
    ),
    pytest.param(
        field("c", "string", logical="io.debezium.data.EnumSet",
              parameters={"allowed": "read,write,admin"}),
        "", pa.list_(pa.string()), [], id="enum-set-empty",
    ),
    pytest.param(
        field("c", "array", items={"type": "string", "optional": True}), ["a", None, "b"],
        pa.list_(pa.string()), ["a", None, "b"], id="array-of-text",
    ),
    pytest.param(
        field("c", "array", items={"type": "int32", "optional": True,
                                   "name": "io.debezium.time.Date", "version": 1}),
        [0, 1], pa.list_(pa.field("item", pa.date32(),
                                  metadata={LOGICAL_KEY: b"io.debezium.time.Date"})),
        [dt.date(1970, 1, 1), dt.date(1970, 1, 2)], id="array-of-dates",
    ),
    pytest.param(
        field("c", "array", items={"type": "struct", "optional": True,
                                   "name": "io.debezium.data.VariableScaleDecimal"}),
        [variable_decimal(15, 1), None], pa.list_(pa.field("item", pa.decimal128(38, 18),
            metadata={LOGICAL_KEY: b"io.debezium.data.VariableScaleDecimal"})),
        [Decimal("1.5"), None], id="array-of-numerics",
    ),
    pytest.param(
        field("c", "struct", logical="io.debezium.data.geometry.Geometry",
              fields=[field("wkb", "bytes", optional=False), field("srid", "int32")]),
        {"wkb": b64(POINT_WKB), "srid": 4326}, pa.binary(), POINT_WKB, id="geometry",
    ),
    pytest.param(
        field("c", "struct", logical="io.debezium.data.geometry.Geography",
              fields=[field("wkb", "bytes", optional=False), field("srid", "int32")]),
        {"wkb": b64(POINT_WKB), "srid": 4326}, pa.binary(), POINT_WKB, id="geography",
    ),
    pytest.param(
        field("c", "struct", logical="io.debezium.data.geometry.Point",
              fields=[field("x", "float64", optional=False), field("y", "float64", optional=False),
                      field("wkb", "bytes"), field("srid", "int32")]),
        {"x": 1.0, "y": 2.0, "wkb": b64(POINT_WKB), "srid": None}, pa.binary(), POINT_WKB,
        id="point",
    ),
    pytest.param(
        field("c", "bytes", logical="io.debezium.data.Bits", parameters={"length": "9"}),
        b64(b"\x05\x01"), pa.binary(), b"\x05\x01", id="bits-falls-back-to-bytes",
    ),
    pytest.param(
        field("c", "int64", logical="io.debezium.time.MicroDuration"), 3_600_000_000, pa.int64(),
        3_600_000_000, id="micro-duration-falls-back-to-int64",
    ),
    pytest.param(
        field("c", "struct", fields=[field("x", "int32"), field("label", "string")]),
        {"x": 3, "label": "a"}, pa.struct([("x", pa.int32()), ("label", pa.string())]),
        {"x": 3, "label": "a"}, id="struct",
    ),
    pytest.param(
        field("c", "map", keys={"type": "string", "optional": False},
              values={"type": "int64", "optional": True}),
        {"a": 1, "b": None}, pa.map_(pa.string(), pa.int64()), [("a", 1), ("b", None)], id="map",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("column", "json_value", "arrow_type", "expected"), LOGICAL_CASES)
def test_logical_type_maps_to_arrow(
    column: dict[str, Any], json_value: object, arrow_type: pa.DataType, expected: object
) -> None:
    batch, arrow_field = decode_one(column, json_value)
    assert batch.dead_letters == ()
    assert arrow_field.type == arrow_type
    batch.table(TABLE).rows.validate(full=True)
    if expected is not None:
        assert batch.table(TABLE).rows.column("c").to_pylist() == [expected]


@pytest.mark.parametrize(("column", "json_value", "arrow_type", "expected"), LOGICAL_CASES)
def test_null_of_every_type_is_null(
    column: dict[str, Any], json_value: object, arrow_type: pa.DataType, expected: object
) -> None:
    batch, _ = decode_one(column, None)
    assert batch.table(TABLE).rows.column("c").to_pylist() == [None]


def test_nano_values_keep_their_nanoseconds() -> None:
    batch, _ = decode_one(field("c", "int64", logical="io.debezium.time.NanoTimestamp"), 123)
    assert batch.table(TABLE).rows.column("c").cast(pa.int64()).to_pylist() == [123]


def test_logical_name_and_nullability_are_in_the_source_schema() -> None:
    column = field("c", "string", optional=False, logical="io.debezium.data.Json")
    batch, _ = decode_one(column, "{}")
    source = batch.table(TABLE).source_schema.field("c")
    assert source.metadata == {LOGICAL_KEY: b"io.debezium.data.Json"}
    assert not source.nullable
    assert batch.table(TABLE).source_schema.field("id").metadata is None


def test_variable_scale_decimal_target_is_configurable() -> None:
    column = field("c", "struct", logical="io.debezium.data.VariableScaleDecimal")
    config = DecoderConfig(variable_scale_decimal=(20, 4))
    batch, arrow_field = decode_one(column, variable_decimal(-15, 1), config)
    assert arrow_field.type == pa.decimal128(20, 4)
    assert batch.table(TABLE).rows.column("c").to_pylist() == [Decimal("-1.5000")]


@pytest.mark.parametrize(
    ("column", "json_value"),
    [
        pytest.param(field("c", "int32"), "12", id="string-in-int"),
        pytest.param(field("c", "int32"), 1.5, id="float-in-int"),
        pytest.param(field("c", "int32"), True, id="bool-in-int"),
        pytest.param(field("c", "int16"), 40000, id="int16-overflow"),
        pytest.param(field("c", "boolean"), 1, id="int-in-bool"),
        pytest.param(field("c", "string"), 5, id="int-in-string"),
        pytest.param(field("c", "float64"), "1.5", id="text-in-float"),
        pytest.param(field("c", "float64"), True, id="bool-in-float"),
        pytest.param(field("c", "int32", logical="io.debezium.time.Date"), 2**40, id="date-range"),
        pytest.param(field("c", "bytes"), "not base64!", id="bad-base64"),
        pytest.param(decimal_field("c", 4, 2), decimal_bytes(10_000), id="decimal-too-wide"),
        pytest.param(
            field("c", "struct", logical="io.debezium.data.VariableScaleDecimal"),
            variable_decimal(1, 19), id="variable-decimal-too-many-digits",
        ),
        pytest.param(
            field("c", "struct", logical="io.debezium.data.VariableScaleDecimal"),
            variable_decimal(10**21, 0), id="variable-decimal-too-large",
        ),
        pytest.param(
            field("c", "string", logical="io.debezium.time.ZonedTimestamp"),
            "2024-06-10T06:13:20", id="zoned-timestamp-without-offset",
        ),
        pytest.param(
            field("c", "int64", logical="io.debezium.time.MicroTime"), -1, id="negative-time",
        ),
        pytest.param(
            field("c", "int32", logical="io.debezium.time.Date"), "2024-01-01", id="text-date",
        ),
        pytest.param(
            field("c", "array", items={"type": "int32", "optional": True}), [1, "x"],
            id="bad-array-item",
        ),
        pytest.param(
            field("c", "struct", logical="io.debezium.data.geometry.Geometry"), {"srid": 1},
            id="geometry-without-wkb",
        ),
    ],
)  # fmt: skip
def test_type_mismatch_is_a_dead_letter(column: dict[str, Any], json_value: object) -> None:
    body = payload("c", after={"id": 1, "c": json_value}, source=pg_source(100))
    good = payload("c", after={"id": 2, "c": None}, source=pg_source(101))
    records = [
        record(value(body, [ID, column]), key({"id": 1}, [ID]), offset=0),
        record(value(good, [ID, column]), key({"id": 2}, [ID]), offset=1),
    ]
    batch = decode_records(records, DecoderConfig())
    assert [(d.offset, d.reason) for d in batch.dead_letters] == [
        (0, DeadLetterReason.TYPE_MISMATCH)
    ]
    assert "'c'" in batch.dead_letters[0].error
    assert batch.table(TABLE).rows.column("id").to_pylist() == [2]


# -- schemaless messages with a target schema ------------------------------------------------


def test_schemaless_payload_is_coerced_to_the_target_schema() -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("price", pa.decimal128(10, 2)),
            pa.field("born", pa.date32()),
            pa.field("seen", pa.timestamp("us")),
            pa.field("seen_at", pa.timestamp("us", tz="UTC")),
            pa.field("tags", pa.list_(pa.string())),
            pa.field("small", pa.int16()),
        ]
    )
    after = {
        "id": 3, "price": decimal_bytes(1999), "born": 1, "seen": 1_000_001,
        "seen_at": "1970-01-01T00:00:01.000001Z", "tags": ["x"], "small": 7,
    }  # fmt: skip
    body = payload("c", after=after, source=pg_source(100))
    config = DecoderConfig(schemas={TABLE: schema}, primary_keys={TABLE: ("id",)})
    batch = decode_records([record(value(body), key({"id": 3}))], config)
    decoded = batch.table(TABLE)
    assert decoded.rows.select(schema.names).to_pylist() == [
        {
            "id": 3, "price": Decimal("19.99"), "born": dt.date(1970, 1, 2),
            "seen": dt.datetime(1970, 1, 1, 0, 0, 1, 1),
            "seen_at": dt.datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=UTC),
            "tags": ["x"], "small": 7,
        }
    ]  # fmt: skip
    assert decoded.source_schema == schema


def test_a_derived_schema_decodes_schemaless_messages_the_same_way() -> None:
    columns = [
        ID,
        field("t", "int32", logical="io.debezium.time.Time"),
        field("ts", "int64", logical="io.debezium.time.Timestamp"),
        field("z", "string", logical="io.debezium.time.ZonedTimestamp"),
        field("n", "struct", logical="io.debezium.data.VariableScaleDecimal"),
        field("s", "string", logical="io.debezium.data.EnumSet"),
        field("g", "struct", logical="io.debezium.data.geometry.Geometry"),
        field("j", "string", logical="io.debezium.data.Json"),
    ]
    after = {
        "id": 1, "t": 1_000, "ts": 1_500, "z": "2024-01-01T00:00:00Z",
        "n": variable_decimal(5, 1), "s": "a,b", "g": {"wkb": b64(POINT_WKB), "srid": 0},
        "j": "[]",
    }  # fmt: skip
    body = payload("c", after=after, source=pg_source(100))
    with_schema = decode_records(
        [record(value(body, columns), key({"id": 1}, [ID]))], DecoderConfig()
    )
    derived = with_schema.table(TABLE)
    config = DecoderConfig(schemas={TABLE: derived.source_schema})
    schemaless = decode_records([record(value(body), key({"id": 1}))], config).table(TABLE)
    assert schemaless.rows.equals(derived.rows)
    assert schemaless.primary_key == ("id",)


def test_schemaless_column_unknown_to_the_target_schema_is_a_dead_letter() -> None:
    schema = pa.schema([pa.field("id", pa.int32())])
    records = [
        record(value(payload("c", after={"id": 1}, source=pg_source(1))), offset=0),
        record(value(payload("c", after={"id": 2, "new": 5}, source=pg_source(2))), offset=1),
    ]
    batch = decode_records(records, DecoderConfig(schemas={TABLE: schema}))
    assert [(d.offset, d.reason) for d in batch.dead_letters] == [
        (1, DeadLetterReason.SCHEMA_MISMATCH)
    ]
    assert batch.table(TABLE).rows.column("id").to_pylist() == [1]


def test_schemaless_column_missing_from_the_payload_is_null() -> None:
    schema = pa.schema([pa.field("id", pa.int32()), pa.field("later", pa.string())])
    message = record(value(payload("c", after={"id": 1}, source=pg_source(1))))
    batch = decode_records([message], DecoderConfig(schemas={TABLE: schema}))
    assert batch.table(TABLE).rows.column("later").to_pylist() == [None]


def test_schemaless_message_without_a_configured_schema_is_a_dead_letter() -> None:
    message = record(value(payload("c", after={"id": 1}, source=pg_source(1))))
    batch = decode_records([message], DecoderConfig())
    assert [d.reason for d in batch.dead_letters] == [DeadLetterReason.NO_SCHEMA]


# -- property tests --------------------------------------------------------------------------


@st.composite
def decimals(draw: st.DrawFn) -> tuple[int, int, int]:
    precision = draw(st.integers(1, 76))
    scale = draw(st.integers(0, precision))
    bound = 10**precision - 1
    return precision, scale, draw(st.integers(-bound, bound))


@given(decimals())
def test_decimal_round_trips_exactly(case: tuple[int, int, int]) -> None:
    precision, scale, unscaled = case
    batch, _ = decode_one(decimal_field("c", precision, scale), decimal_bytes(unscaled))
    expected = Decimal(unscaled).scaleb(-scale, EXACT)
    assert batch.table(TABLE).rows.column("c").to_pylist() == [expected]


@given(st.integers(-(10**20) + 1, 10**20 - 1), st.integers(0, 30))
def test_variable_scale_decimal_is_exact_or_a_dead_letter(unscaled: int, scale: int) -> None:
    column = field("c", "struct", logical="io.debezium.data.VariableScaleDecimal")
    batch, _ = decode_one(column, variable_decimal(unscaled, scale))
    exact = Decimal(unscaled).scaleb(-scale)
    if scale <= 18 or unscaled % 10 ** (scale - 18) == 0:
        assert batch.table(TABLE).rows.column("c").to_pylist() == [exact]
    else:
        assert [d.reason for d in batch.dead_letters] == [DeadLetterReason.TYPE_MISMATCH]
