"""Avro-encoded Debezium events (Confluent wire format) decode as their JSON twins do.

No schema registry can be run on these machines (Apicurio's server app does not resolve from
Maven Central, Confluent's is not there: docs/ingest.md), so these tests give the decoder its
schemas by id through its ``SchemaSource`` seam, the way the registry client does; the framing
is checked against confluent-kafka's own implementation of the wire format, and the registry
client is exercised for real only where no registry is needed: one that cannot be reached.
The schemas are written as Kafka Connect's ``AvroData`` writes Debezium's envelopes
(``connect.*`` properties, ``[null, T]`` unions, the row record referenced by name in
``after``), and the bodies are encoded by fastavro under those schemas, logical types included.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import math
from typing import Any

import fastavro
import orjson
import pytest
from confluent_kafka.schema_registry.common.serde import SchemaId
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.debezium import DeadLetterReason, DecoderConfig, RawRecord, decode_records
from ingest.debezium.avro import (
    AvroDecoding,
    AvroMessageError,
    SchemaRegistryUnavailable,
    UnknownSchema,
    decode_avro_chunks,
    frame,
    schema_id,
)
from ingest.debezium.errors import DecoderConfigError
from ingest.debezium.model import RecordChunk

TOPIC = "dbserver1.public.items"
TABLE = "public.items"
Json = dict[str, Any]


class Schemas:
    """Schemas by id, as a registry holds them (the decoder's ``SchemaSource``)."""

    def __init__(self, schemas: dict[int, Json]) -> None:
        self.schemas = schemas
        self.asked: list[int] = []

    def schema_text(self, schema_id: int) -> str:
        self.asked.append(schema_id)
        if schema_id not in self.schemas:
            raise UnknownSchema(schema_id, "Schema not found")
        return orjson.dumps(self.schemas[schema_id]).decode()


def optional(kind: object) -> Json:
    return {"type": ["null", kind], "default": None}


def column(name: str, kind: object, *, nullable: bool = True) -> Json:
    return {"name": name, **(optional(kind) if nullable else {"type": kind})}


DECIMAL = {
    "type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
    "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
    "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal",
}  # fmt: skip
MICRO_TIMESTAMP = {
    "type": "long",
    "connect.version": 1,
    "connect.name": "io.debezium.time.MicroTimestamp",
}
CONNECT_TIMESTAMP = {
    "type": "long", "connect.version": 1, "connect.name": "org.apache.kafka.connect.data.Timestamp",
    "logicalType": "timestamp-millis",
}  # fmt: skip
DATE = {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"}
ZONED = {"type": "string", "connect.version": 1, "connect.name": "io.debezium.time.ZonedTimestamp"}
SMALLINT = {"type": "int", "connect.type": "int16"}
VARIABLE_DECIMAL = {
    "type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
    "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
    "connect.doc": "Variable scaled decimal", "connect.version": 1,
    "connect.name": "io.debezium.data.VariableScaleDecimal",
}  # fmt: skip

COLUMNS = [
    column("id", "int", nullable=False),
    column("name", "string"),
    column("price", DECIMAL),
    column("qty", SMALLINT),
    column("weight", "double"),
    column("created", MICRO_TIMESTAMP),
    column("stamped", CONNECT_TIMESTAMP),
    column("due", DATE),
    column("zoned", ZONED),
    column("blob", "bytes"),
    column("tags", {"type": "array", "items": ["null", "string"]}),
    column("amount", VARIABLE_DECIMAL),
]

SOURCE = {
    "type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
    "fields": [
        {"name": "version", "type": "string"}, {"name": "connector", "type": "string"},
        {"name": "name", "type": "string"}, {"name": "ts_ms", "type": "long"},
        {"name": "snapshot", "type": [
            "null", {"type": "string", "connect.version": 1, "connect.default": "false",
                     "connect.parameters": {"allowed": "true,first,last,false,incremental"},
                     "connect.name": "io.debezium.data.Enum"}], "default": "false"},
        {"name": "db", "type": "string"}, {"name": "schema", "type": "string"},
        {"name": "table", "type": "string"},
        {"name": "txId", "type": ["null", "long"], "default": None},
        {"name": "lsn", "type": ["null", "long"], "default": None},
    ],
    "connect.name": "io.debezium.connector.postgresql.Source",
}  # fmt: skip


def envelope(columns: list[Json]) -> Json:
    """The value schema as AvroData writes a Debezium PostgreSQL envelope."""
    row = {
        "type": "record", "name": "Value", "fields": columns,
        "connect.name": "dbserver1.public.items.Value",
    }  # fmt: skip
    return {
        "type": "record", "name": "Envelope", "namespace": "dbserver1.public.items",
        "fields": [
            {"name": "before", "type": ["null", row], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": SOURCE},
            {"name": "transaction", "type": ["null", {
                "type": "record", "name": "block", "namespace": "event",
                "fields": [{"name": "id", "type": "string"},
                           {"name": "total_order", "type": "long"},
                           {"name": "data_collection_order", "type": "long"}],
                "connect.version": 1, "connect.name": "event.block"}], "default": None},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
        "connect.version": 2, "connect.name": "dbserver1.public.items.Envelope",
    }  # fmt: skip


KEY = {
    "type": "record", "name": "Key", "namespace": "dbserver1.public.items",
    "fields": [{"name": "id", "type": "int"}], "connect.name": "dbserver1.public.items.Key",
}  # fmt: skip
VALUE_V1, VALUE_V2, KEY_ID = 11, 12, 10


def encode(schema: Json, datum: object, schema_id: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return frame(schema_id, out.getvalue())


def row(i: int, **changes: object) -> Json:
    values: Json = {
        "id": i, "name": f"item {i}", "price": decimal.Decimal("12.34") * i, "qty": -i,
        "weight": 0.5 * i, "created": 1_718_000_000_123_456 + i, "stamped": 1_718_000_000_123,
        "due": 19_900 + i, "zoned": "2024-06-10T06:13:20.123456Z", "blob": bytes([i, 0, 255]),
        "tags": ["a", None, "b"], "amount": {"scale": 3, "value": (12345 * i).to_bytes(4, "big")},
    }  # fmt: skip
    return {**values, **changes}


def event(op: str, lsn: int, *, before: Json | None = None, after: Json | None = None) -> Json:
    source = {
        "version": "3.6.1.Final", "connector": "postgresql", "name": "dbserver1",
        "ts_ms": 1_718_000_000_000, "snapshot": "false", "db": "shop", "schema": "public",
        "table": "items", "txId": 7, "lsn": lsn,
    }  # fmt: skip
    return {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1}


def message(
    offset: int, value: bytes | None, key_id: int = 1, *, key: bytes | None = None
) -> RawRecord:
    framed_key = key if key is not None else encode(KEY, {"id": key_id}, KEY_ID)
    return RawRecord(TOPIC, 0, offset, framed_key, value, 1_718_000_000_000 + offset)


def decode(records: list[RawRecord], schemas: Schemas) -> Any:
    return decode_avro_chunks(RecordChunk.split(records), DecoderConfig(), None, schemas)


def v1_schemas() -> Schemas:
    return Schemas({KEY_ID: KEY, VALUE_V1: envelope(COLUMNS)})


# -- the wire format ---------------------------------------------------------------------------


def test_the_frame_is_confluent_kafkas_wire_format() -> None:
    framed = frame(258, b"body")
    assert framed[:5] == SchemaId("AVRO", 258).id_to_bytes()
    parsed = SchemaId("AVRO")
    assert parsed.from_bytes(io.BytesIO(framed)).read() == b"body"
    assert parsed.id == schema_id(framed) == 258


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (b'{"schema": null}', "magic byte 0x7b"),
        (b"\x01" + bytes(16), "magic byte 0x01"),
        (b"\x00\x00\x01", "3 bytes: too short"),
    ],
)
def test_anything_else_is_refused_with_what_it_is(message: bytes, expected: str) -> None:
    with pytest.raises(AvroMessageError, match=expected) as caught:
        schema_id(message)
    assert caught.value.reason is DeadLetterReason.BAD_WIRE_FORMAT


# -- Avro events decode as the JSON converter's do -----------------------------------------------


def json_twin(value: Json, columns: list[Json]) -> bytes:
    """The JsonConverter's message for the same event and table (schemas.enable=true)."""

    def connect(kind: object) -> Json:
        if isinstance(kind, dict) and kind.get("type") == "record":
            fields = [{**connect(f["type"]), "field": f["name"]} for f in kind["fields"]]
            return {"type": "struct", "fields": fields, "optional": False,
                    "name": kind["connect.name"]}  # fmt: skip
        if isinstance(kind, dict) and kind.get("type") == "array":
            return {"type": "array", "items": {**connect(kind["items"][1]), "optional": True},
                    "optional": False}  # fmt: skip
        if isinstance(kind, list):
            return {**connect(kind[1]), "optional": True}
        if isinstance(kind, dict):
            base = connect(kind["type"])
            if kind.get("connect.type"):
                base["type"] = kind["connect.type"]
            if "connect.name" in kind:
                base["name"] = kind["connect.name"]
            if "connect.parameters" in kind:
                base["parameters"] = kind["connect.parameters"]
            return base
        names = {"int": "int32", "long": "int64", "double": "double", "string": "string",
                 "bytes": "bytes", "boolean": "boolean"}  # fmt: skip
        return {"type": names[str(kind)], "optional": False}

    row_schema = connect({"type": "record", "fields": columns, "connect.name": "Value"})

    def as_json(data: Json | None) -> Json | None:
        if data is None:
            return None
        out = dict(data)
        for name, item in data.items():
            if isinstance(item, decimal.Decimal):
                unscaled = int(item.scaleb(2))
                out[name] = base64.b64encode(unscaled.to_bytes(8, "big", signed=True)).decode()
            elif isinstance(item, bytes):
                out[name] = base64.b64encode(item).decode()
            elif isinstance(item, dict):
                out[name] = {**item, "value": base64.b64encode(item["value"]).decode()}
            elif isinstance(item, float) and not math.isfinite(item):
                out[name] = "NaN" if math.isnan(item) else "Infinity"
        return out

    schema = {
        "type": "struct", "optional": False, "name": "Envelope",
        "fields": [{**row_schema, "optional": True, "field": "before"},
                   {**row_schema, "optional": True, "field": "after"},
                   {"type": "struct", "field": "source", "optional": False,
                    "fields": [{"type": "int64", "optional": True, "field": "lsn"}]},
                   {"type": "string", "optional": False, "field": "op"}],
    }  # fmt: skip
    payload = {
        "before": as_json(value["before"]),
        "after": as_json(value["after"]),
        "source": {"lsn": value["source"]["lsn"]},
        "op": value["op"],
    }
    return orjson.dumps({"schema": schema, "payload": payload})


def json_key(key_id: int) -> bytes:
    schema = {"type": "struct", "optional": False,
              "fields": [{"type": "int32", "optional": False, "field": "id"}]}  # fmt: skip
    return orjson.dumps({"schema": schema, "payload": {"id": key_id}})


def test_inserts_updates_deletes_and_types_equal_the_json_converters() -> None:
    events = [
        (1, event("r", 100, after=row(1))),
        (2, event("c", 200, after=row(2, weight=float("nan"), name=None, tags=[]))),
        (1, event("u", 300, after=row(1, price=decimal.Decimal("-0.05"), qty=32767))),
        (2, event("d", 400, before=None)),  # default replica identity: the key says which row
        (3, event("c", 500, after=row(3, weight=float("inf")))),
    ]
    avro = [
        message(i, encode(envelope(COLUMNS), value, VALUE_V1), key_id)
        for i, (key_id, value) in enumerate(events)
    ]
    avro.insert(4, message(99, None, 2))  # the tombstone after the delete
    json = [
        RawRecord(TOPIC, 0, i, json_key(key_id), json_twin(value, COLUMNS), 1_718_000_000_000 + i)
        for i, (key_id, value) in enumerate(events)
    ]
    got, expected = decode(avro, v1_schemas()), decode_records(json, DecoderConfig())
    assert got.dead_letters == expected.dead_letters == ()
    assert got.tombstones == 1
    ours, theirs = got.table(TABLE), expected.table(TABLE)
    assert ours.primary_key == theirs.primary_key == ("id",)
    assert ours.source_schema.equals(theirs.source_schema, check_metadata=True)
    for name in ours.rows.column_names:  # NaN is not equal to itself: compared below
        if name != "weight":
            assert ours.rows.column(name).equals(theirs.rows.column(name)), name
    assert str(ours.rows.column("weight")) == str(theirs.rows.column("weight"))
    rows = ours.rows.to_pylist()
    assert [r["id"] for r in rows] == [1, 2, 1, 2, 3]
    assert rows[2]["price"] == decimal.Decimal("-0.05") and rows[2]["qty"] == 32767
    assert math.isnan(rows[1]["weight"]) and rows[4]["weight"] == math.inf
    assert rows[0]["created"] == dt.datetime(2024, 6, 10, 6, 13, 20, 123457)
    assert rows[0]["stamped"] == dt.datetime(2024, 6, 10, 6, 13, 20, 123000)
    assert rows[0]["due"] == dt.date(2024, 6, 27)
    assert rows[0]["blob"] == bytes([1, 0, 255]) and rows[0]["tags"] == ["a", None, "b"]
    assert rows[0]["amount"] == decimal.Decimal("12.345")
    assert ours.source_schema.field("qty").type.bit_width == 16
    assert str(ours.source_schema.field("price").type) == "decimal128(10, 2)"


def test_a_new_schema_id_mid_stream_adds_the_column() -> None:
    added = [*COLUMNS, column("vip", "boolean")]
    schemas = Schemas({KEY_ID: KEY, VALUE_V1: envelope(COLUMNS), VALUE_V2: envelope(added)})
    records = [
        message(0, encode(envelope(COLUMNS), event("c", 10, after=row(1)), VALUE_V1), 1),
        message(1, encode(envelope(added), event("c", 20, after=row(2, vip=True)), VALUE_V2), 2),
        message(2, encode(envelope(added), event("u", 30, after=row(1, vip=False)), VALUE_V2), 1),
    ]
    decoded = decode(records, schemas)
    assert decoded.dead_letters == ()
    table = decoded.table(TABLE)
    assert table.source_schema.names[-1] == "vip" and table.source_schema.field("vip").nullable
    assert table.rows.column("vip").to_pylist() == [None, True, False]
    assert sorted(schemas.asked) == [KEY_ID, VALUE_V1, VALUE_V2]  # each id fetched once


def test_schemas_are_fetched_once_per_id() -> None:
    schemas = v1_schemas()
    value = encode(envelope(COLUMNS), event("c", 10, after=row(1)), VALUE_V1)
    decode([message(i, value) for i in range(50)], schemas)
    assert sorted(schemas.asked) == [KEY_ID, VALUE_V1]  # one key is read, to learn the key


# -- bad messages are dead letters, never dropped ------------------------------------------------


def test_bad_messages_are_dead_letters_with_their_original_bytes() -> None:
    good = encode(envelope(COLUMNS), event("c", 10, after=row(1)), VALUE_V1)
    unknown = frame(999, good[5:])
    json_value = json_twin(event("c", 20, after=row(2)), COLUMNS)
    truncated = good[:-3]
    trailing = good + b"\x00\x00"
    records = [
        message(0, good),
        message(1, unknown),
        message(2, json_value),
        message(3, truncated),
        message(4, trailing),
        message(5, encode(envelope(COLUMNS), event("c", 30, after=row(3)), VALUE_V1), 3),
    ]
    decoded = decode(records, v1_schemas())
    assert decoded.table(TABLE).rows.column("id").to_pylist() == [1, 3]
    letters = {d.offset: d for d in decoded.dead_letters}
    assert {o: d.reason for o, d in letters.items()} == {
        1: DeadLetterReason.UNKNOWN_SCHEMA_ID,
        2: DeadLetterReason.BAD_WIRE_FORMAT,
        3: DeadLetterReason.MALFORMED_AVRO,
        4: DeadLetterReason.MALFORMED_AVRO,
    }
    assert "no schema with id 999" in letters[1].error
    assert "2 bytes left" in letters[4].error
    assert [letters[o].value for o in (1, 2, 3, 4)] == [unknown, json_value, truncated, trailing]
    assert all(d.table == TABLE and d.key == records[d.offset].key for d in letters.values())


def test_a_message_the_json_decoder_refuses_keeps_its_avro_bytes() -> None:
    value = encode(envelope(COLUMNS), event("t", 10), VALUE_V1)  # a truncate
    decoded = decode([message(0, value)], v1_schemas())
    (letter,) = decoded.dead_letters
    assert letter.reason is DeadLetterReason.UNSUPPORTED_OP
    assert letter.value == value and letter.key == message(0, value).key


def test_a_delete_whose_avro_key_cannot_be_read_says_so() -> None:
    value = encode(envelope(COLUMNS), event("d", 10), VALUE_V1)
    bad_key = frame(404, b"\x02")
    decoded = decode([message(0, value, key=bad_key)], v1_schemas())
    (letter,) = decoded.dead_letters
    assert letter.reason is DeadLetterReason.BAD_KEY
    assert "no schema with id 404" in letter.error
    assert letter.key == bad_key and letter.value == value


def test_a_schema_without_a_connect_form_dead_letters_its_messages() -> None:
    odd = envelope([column("id", "int", nullable=False), column("x", ["null", "int", "string"])])
    odd["fields"][0]["type"][1]["fields"][1] = {"name": "x", "type": ["int", "string"]}
    decoded = decode([message(0, frame(VALUE_V2, b"\x00"))], Schemas({VALUE_V2: odd}))
    (letter,) = decoded.dead_letters
    assert letter.reason is DeadLetterReason.UNSUPPORTED_SCHEMA
    assert "is not [null, T]" in letter.error


def test_topics_without_rows_are_not_decoded() -> None:
    heartbeat = RawRecord("__debezium-heartbeat.dbserver1", 0, 0, None, b"\x07garbage")
    decoded = decode([heartbeat], v1_schemas())
    assert decoded.ignored == 1 and decoded.dead_letters == ()


# -- the registry client, for real where no registry is needed -----------------------------------


def test_an_unreachable_registry_fails_the_task_without_showing_credentials() -> None:
    decoding = AvroDecoding.of("http://user:secret@127.0.0.1:9/", {"max.retries": "0"})
    value = encode(envelope(COLUMNS), event("c", 10, after=row(1)), VALUE_V1)
    config = DecoderConfig(avro=decoding)
    with pytest.raises(SchemaRegistryUnavailable) as caught:
        decode_records([message(0, value)], config)
    assert caught.value.schema_id == VALUE_V1
    assert "http://127.0.0.1:9/" in str(caught.value)
    assert "secret" not in str(caught.value) and "secret" not in repr(decoding)
    hidden = AvroDecoding.of("http://127.0.0.1:9/", {"basic.auth.user.info": "u:pw"})
    assert "pw" not in repr(hidden) and "pw" not in repr(DecoderConfig(avro=hidden))


def test_registry_settings_are_checked_when_configured() -> None:
    with pytest.raises(DecoderConfigError, match="url"):
        AvroDecoding.of("localhost:8081")
    with pytest.raises(DecoderConfigError, match="bogus"):
        AvroDecoding.of("http://registry:8080/apis/ccompat/v7", {"bogus.key": "1"}).check()
    with pytest.raises(DecoderConfigError, match="number"):
        AvroDecoding.of("http://registry:8080", {"max.retries": "many"}).check()
    AvroDecoding.of("http://registry:8080", {"basic.auth.user.info": "u:p"}).check()


def test_maps_enums_fixed_and_float_columns_decode() -> None:
    entry = {
        "type": "record", "name": "MapEntry", "namespace": "io.confluent.connect.avro",
        "fields": [{"name": "key", "type": "int"}, {"name": "value", "type": ["null", "string"]}],
    }  # fmt: skip
    columns = [
        column("id", "int", nullable=False),
        column("attrs", {"type": "map", "values": "long"}),
        column("codes", {"type": "array", "items": entry}),
        column("size", {"type": "enum", "name": "Size", "symbols": ["S", "M", "L"]}),
        column("digest", {"type": "fixed", "name": "Digest", "size": 4}),
        {"name": "ratio", "type": ["float", "null"], "default": 0.0},
    ]
    after = {
        "id": 1, "attrs": {"a": 1, "b": 2}, "codes": [{"key": 7, "value": "x"}], "size": "M",
        "digest": b"\x00\x01\x02\x03", "ratio": float("-inf"),
    }  # fmt: skip
    value = encode(envelope(columns), event("c", 10, after=after), VALUE_V2)
    decoded = decode([message(0, value)], Schemas({KEY_ID: KEY, VALUE_V2: envelope(columns)}))
    assert decoded.dead_letters == ()
    (got,) = decoded.table(TABLE).rows.select([c["name"] for c in columns]).to_pylist()
    assert got == {
        "id": 1, "attrs": [("a", 1), ("b", 2)], "codes": [(7, "x")], "size": "M",
        "digest": b"\x00\x01\x02\x03", "ratio": float("-inf"),
    }  # fmt: skip


def test_the_config_pickles_to_executors_which_share_one_registry_client() -> None:
    import pickle

    config = DecoderConfig(avro=AvroDecoding.of("http://r:8080", {"basic.auth.user.info": "u:p"}))
    copy = pickle.loads(pickle.dumps(config))
    assert copy.avro == config.avro
    assert copy.avro is not None and copy.avro.source() is config.avro.source()


def test_an_unknown_id_is_asked_again_in_the_next_batch_a_schema_is_not() -> None:
    class Registry(Schemas):
        compiled: dict[int, object]

    registry = Registry({KEY_ID: KEY})
    registry.compiled = {}  # kept across batches, as the registry client's cache is
    value = encode(envelope(COLUMNS), event("c", 10, after=row(1)), VALUE_V1)
    first = decode([message(0, value), message(1, value)], registry)
    assert [d.reason for d in first.dead_letters] == [DeadLetterReason.UNKNOWN_SCHEMA_ID] * 2
    registry.schemas[VALUE_V1] = envelope(COLUMNS)  # the registry learns it (a restore, say)
    second = decode([message(2, value)], registry)
    assert second.dead_letters == () and second.table(TABLE).rows.num_rows == 1
    decode([message(3, value)], registry)
    assert registry.asked.count(VALUE_V1) == 2 and registry.asked.count(KEY_ID) == 1


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_corrupt_bodies_are_dead_letters_or_rows_never_an_error(data: st.DataObject) -> None:
    good = bytearray(encode(envelope(COLUMNS), event("c", 10, after=row(1)), VALUE_V1))
    for _ in range(data.draw(st.integers(1, 6))):
        good[data.draw(st.integers(5, len(good) - 1))] = data.draw(st.integers(0, 255))
    corrupt = bytes(good[: data.draw(st.integers(5, len(good)))])
    decoded = decode([message(0, corrupt)], v1_schemas())
    rows = sum(t.rows.num_rows for t in decoded.tables)
    assert rows + len(decoded.dead_letters) == 1
    assert all(d.value == corrupt for d in decoded.dead_letters)
