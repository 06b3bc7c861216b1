"""Schemas that change within a batch: unify to the widest, split when incompatible."""

from __future__ import annotations

import pyarrow as pa

from catalog.model import ROW_KIND_COLUMN
from ingest.debezium import DecoderConfig, decode_records, table_schemas
from ingest.debezium.unify import unify_schemas, widen_type
from tests.fixtures.debezium_events import (
    CUSTOMER_FIELDS,
    CUSTOMER_KEY_FIELDS,
    customer,
    decimal_bytes,
    decimal_field,
    field,
    key,
    numbered,
    payload,
    pg_source,
    record,
    value,
)

TABLE = "public.customers"


def change(after: dict, fields: list[dict], lsn: int) -> object:
    body = payload("c", after=after, source=pg_source(lsn))
    return record(value(body, fields), key({"id": after["id"]}, CUSTOMER_KEY_FIELDS))


def test_column_added_mid_batch_is_null_for_older_rows() -> None:
    newer = [*CUSTOMER_FIELDS, field("vip", "boolean", optional=False)]
    records = [
        change(customer(1), CUSTOMER_FIELDS, 10),
        change({**customer(2), "vip": True}, newer, 20),
        change(customer(3), CUSTOMER_FIELDS, 30),  # a lagging partition still on the old schema
    ]
    batch = decode_records(numbered(records), DecoderConfig())
    decoded = batch.table(TABLE)
    assert decoded.rows.column("id").to_pylist() == [1, 2, 3]
    assert decoded.rows.column("vip").to_pylist() == [None, True, None]
    assert decoded.source_schema.names == ["id", "first_name", "last_name", "email", "vip"]
    assert decoded.source_schema.field("vip").nullable
    assert not decoded.source_schema.field("id").nullable


def test_widened_int_and_decimal_unify_to_the_wider_type() -> None:
    old = [field("id", "int32", optional=False), field("n", "int16"), decimal_field("p", 5, 2)]
    new = [field("id", "int32", optional=False), field("n", "int64"), decimal_field("p", 12, 4)]
    records = [
        change({"id": 1, "n": 7, "p": decimal_bytes(12345)}, old, 1),
        change({"id": 2, "n": 2**40, "p": decimal_bytes(-1)}, new, 2),
    ]
    decoded = decode_records(numbered(records), DecoderConfig()).table(TABLE)
    assert decoded.rows.schema.field("n").type == pa.int64()
    assert decoded.rows.schema.field("p").type == pa.decimal128(12, 4)
    assert decoded.rows.column("n").to_pylist() == [7, 2**40]
    assert [str(v) for v in decoded.rows.column("p").to_pylist()] == ["123.4500", "-0.0001"]


def test_incompatible_type_change_splits_the_table_into_segments() -> None:
    old = [field("id", "int32", optional=False), field("code", "int32")]
    new = [field("id", "int32", optional=False), field("code", "string")]
    records = [
        change({"id": 1, "code": 5}, old, 1),
        change({"id": 2, "code": "X5"}, new, 2),
        change({"id": 3, "code": 6}, old, 3),
    ]
    batch = decode_records(numbered(records), DecoderConfig())
    first, second = batch.segments(TABLE)
    assert first.rows.column("code").to_pylist() == [5, 6]
    assert second.rows.column("code").to_pylist() == ["X5"]
    assert second.rows.schema.field("code").type == pa.string()
    assert table_schemas(batch)[TABLE].field("code").type == pa.string()


def test_table_schemas_reports_the_carried_schema_per_table() -> None:
    records = [change(customer(1), CUSTOMER_FIELDS, 1)]
    schemas = table_schemas(decode_records(records, DecoderConfig()))
    assert list(schemas) == [TABLE]
    assert schemas[TABLE].names == ["id", "first_name", "last_name", "email"]
    assert ROW_KIND_COLUMN not in schemas[TABLE].names


def test_deletes_and_upserts_with_different_schemas_keep_batch_order() -> None:
    newer = [*CUSTOMER_FIELDS, field("vip", "boolean")]
    delete = payload("d", before={"id": 1}, source=pg_source(30))
    records = [
        change({**customer(1), "vip": False}, newer, 10),
        change(customer(2), CUSTOMER_FIELDS, 20),
        record(value(delete, newer), key({"id": 1}, CUSTOMER_KEY_FIELDS)),
    ]
    rows = decode_records(numbered(records), DecoderConfig()).table(TABLE).rows
    assert rows.column("id").to_pylist() == [1, 2, 1]
    assert rows.column(ROW_KIND_COLUMN).to_pylist() == [0, 0, 1]


def test_widening_rules() -> None:
    assert widen_type(pa.int8(), pa.int32()) == pa.int32()
    assert widen_type(pa.float32(), pa.float64()) == pa.float64()
    assert widen_type(pa.decimal128(10, 2), pa.decimal128(10, 4)) == pa.decimal128(12, 4)
    assert widen_type(pa.decimal128(38, 0), pa.decimal128(38, 2)) == pa.decimal256(40, 2)
    assert widen_type(pa.string(), pa.large_string()) == pa.large_string()
    assert widen_type(pa.list_(pa.int16()), pa.list_(pa.int64())) == pa.list_(pa.int64())
    assert widen_type(pa.int64(), pa.float64()) is None
    assert widen_type(pa.timestamp("ms"), pa.timestamp("us")) is None
    assert widen_type(pa.int32(), pa.string()) is None


def test_struct_fields_unify_by_name() -> None:
    first = pa.schema([pa.field("s", pa.struct([("a", pa.int8())]))])
    second = pa.schema([pa.field("s", pa.struct([("a", pa.int16()), ("b", pa.string())]))])
    unified = unify_schemas(first, second)
    assert unified is not None
    assert unified.field("s").type == pa.struct(
        [pa.field("a", pa.int16()), pa.field("b", pa.string())]
    )
