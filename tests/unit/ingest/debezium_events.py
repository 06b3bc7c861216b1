"""Builders of Debezium JSON messages as the Kafka Connect JsonConverter writes them.

The shapes follow Debezium's documented PostgreSQL and MySQL change events: an envelope
``{"schema": ..., "payload": {"before", "after", "source", "op", "ts_ms", "transaction"}}``
(``schemas.enable=true``) or just the payload (``schemas.enable=false``); keys likewise.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ingest.debezium import RawRecord

Json = dict[str, Any]

SERVER = "dbserver1"
TS_MS = 1_718_000_000_000


def field(
    name: str,
    kind: str,
    *,
    optional: bool = True,
    logical: str | None = None,
    parameters: Mapping[str, str] | None = None,
    **extra: Any,
) -> Json:
    """One connect field schema (``{"type", "optional", "name", "parameters", "field"}``)."""
    schema: Json = {"type": kind, "optional": optional}
    if logical is not None:
        schema["name"] = logical
        schema["version"] = 1
    if parameters is not None:
        schema["parameters"] = dict(parameters)
    schema.update(extra)
    schema["field"] = name
    return schema


def decimal_field(name: str, precision: int, scale: int, *, optional: bool = True) -> Json:
    return field(
        name,
        "bytes",
        optional=optional,
        logical="org.apache.kafka.connect.data.Decimal",
        parameters={"scale": str(scale), "connect.decimal.precision": str(precision)},
    )


def decimal_bytes(unscaled: int) -> str:
    """An unscaled integer as the JsonConverter writes a Decimal: base64 big-endian two's
    complement in the fewest bytes (like Java's ``BigInteger.toByteArray``)."""
    length = max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


def variable_decimal(unscaled: int, scale: int) -> Json:
    return {"scale": scale, "value": decimal_bytes(unscaled)}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


PG_SOURCE_SCHEMA: Json = {
    "type": "struct",
    "optional": False,
    "name": "io.debezium.connector.postgresql.Source",
    "field": "source",
    "fields": [
        field("version", "string", optional=False),
        field("connector", "string", optional=False),
        field("name", "string", optional=False),
        field("ts_ms", "int64", optional=False),
        field(
            "snapshot",
            "string",
            logical="io.debezium.data.Enum",
            parameters={"allowed": "true,first,first_in_data_collection,last,false,incremental"},
            default="false",
        ),
        field("db", "string", optional=False),
        field("sequence", "string"),
        field("ts_us", "int64"),
        field("ts_ns", "int64"),
        field("schema", "string", optional=False),
        field("table", "string", optional=False),
        field("txId", "int64"),
        field("lsn", "int64"),
        field("xmin", "int64"),
    ],
}


def row_schema(fields: Sequence[Json], name: str, table: str = "public.customers") -> Json:
    return {
        "type": "struct",
        "fields": list(fields),
        "optional": True,
        "name": f"{SERVER}.{table}.Value",
        "field": name,
    }


def envelope_schema(fields: Sequence[Json], table: str = "public.customers") -> Json:
    """The value schema of a Debezium change event for a table with ``fields``."""
    return {
        "type": "struct",
        "fields": [
            row_schema(fields, "before", table),
            row_schema(fields, "after", table),
            PG_SOURCE_SCHEMA,
            field("op", "string", optional=False),
            field("ts_ms", "int64"),
            {
                "type": "struct",
                "fields": [
                    field("id", "string", optional=False),
                    field("total_order", "int64", optional=False),
                    field("data_collection_order", "int64", optional=False),
                ],
                "optional": True,
                "name": "event.block",
                "version": 1,
                "field": "transaction",
            },
        ],
        "optional": False,
        "name": f"{SERVER}.{table}.Envelope",
        "version": 2,
    }


def pg_source(
    lsn: int | None, *, table: str = "customers", snapshot: str = "false", tx: int = 771
) -> Json:
    return {
        "version": "3.0.7.Final",
        "connector": "postgresql",
        "name": SERVER,
        "ts_ms": TS_MS - 20,
        "snapshot": snapshot,
        "db": "inventory",
        "sequence": None if lsn is None else f'["{lsn - 8}","{lsn}"]',
        "ts_us": (TS_MS - 20) * 1000,
        "ts_ns": (TS_MS - 20) * 1_000_000,
        "schema": "public",
        "table": table,
        "txId": tx,
        "lsn": lsn,
        "xmin": None,
    }


def mysql_source(file: str, pos: int, row: int = 0, *, table: str = "customers") -> Json:
    return {
        "version": "3.0.7.Final",
        "connector": "mysql",
        "name": SERVER,
        "ts_ms": TS_MS - 20,
        "snapshot": "false",
        "db": "inventory",
        "sequence": None,
        "table": table,
        "server_id": 223344,
        "gtid": None,
        "file": file,
        "pos": pos,
        "row": row,
        "thread": 7,
        "query": None,
    }


def payload(
    op: str,
    *,
    before: Json | None = None,
    after: Json | None = None,
    source: Json | None = None,
    ts_ms: int | None = TS_MS,
) -> Json:
    return {
        "before": before,
        "after": after,
        "source": source if source is not None else pg_source(24_023_128),
        "transaction": None,
        "op": op,
        "ts_ms": ts_ms,
    }


def value(
    body: Json, fields: Sequence[Json] | None = None, table: str = "public.customers"
) -> bytes:
    """A message value: with the embedded schema when ``fields`` are given, else bare payload."""
    if fields is None:
        return orjson.dumps(body)
    return orjson.dumps({"schema": envelope_schema(fields, table), "payload": body})


def key(
    values: Json, fields: Sequence[Json] | None = None, table: str = "public.customers"
) -> bytes:
    if fields is None:
        return orjson.dumps(values)
    schema = {"type": "struct", "fields": list(fields), "optional": False,
              "name": f"{SERVER}.{table}.Key"}  # fmt: skip
    return orjson.dumps({"schema": schema, "payload": values})


def record(
    value_bytes: bytes | None,
    key_bytes: bytes | None = None,
    *,
    topic: str = f"{SERVER}.public.customers",
    offset: int = 0,
    partition: int = 0,
) -> RawRecord:
    return RawRecord(topic, partition, offset, key_bytes, value_bytes, TS_MS)


def numbered(records: Sequence[RawRecord]) -> list[RawRecord]:
    """The records with consecutive offsets, as one partition would deliver them."""
    return [
        RawRecord(r.topic, r.partition, i, r.key, r.value, r.timestamp_ms)
        for i, r in enumerate(records)
    ]


CUSTOMER_FIELDS = [
    field("id", "int32", optional=False),
    field("first_name", "string", optional=False),
    field("last_name", "string", optional=False),
    field("email", "string"),
]
CUSTOMER_KEY_FIELDS = [field("id", "int32", optional=False)]


def customer(id_: int, email: str | None = None, first: str = "Sally") -> Json:
    return {"id": id_, "first_name": first, "last_name": "Thomas", "email": email}


def customer_change(
    op: str,
    id_: int,
    *,
    lsn: int,
    before: Json | None = None,
    after: Json | None = None,
    schema: bool = True,
    offset: int = 0,
) -> RawRecord:
    """A change event of ``inventory.public.customers`` as Debezium's tutorial shows it."""
    body = payload(op, before=before, after=after, source=pg_source(lsn))
    fields = CUSTOMER_FIELDS if schema else None
    key_fields = CUSTOMER_KEY_FIELDS if schema else None
    return record(value(body, fields), key({"id": id_}, key_fields), offset=offset)
