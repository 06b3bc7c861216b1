"""Which schema decodes a batch's schemaless messages, and which tables a job knows up front."""

from __future__ import annotations

import uuid

import orjson
import pyarrow as pa

from catalog.meta import TableMeta
from catalog.names import TableName
from catalog.partitioning import PartitionSpec
from ingest.debezium import DecoderConfig, RawRecord, decode_records
from ingest.formats import SourceFormat
from ingest.sink.decoding import BatchDecoders
from ingest.sink.tables import tables_of_topics

TOPIC = "db.shop.items"


def meta(schema: pa.Schema, *, key: tuple[str, ...] = ("id",), schema_id: int = 0) -> TableMeta:
    return TableMeta(
        uuid.UUID(int=1),
        TableName("shop", "items"),
        "/tmp/x",
        PartitionSpec((), 2),
        key,
        {},
        {schema_id: schema},
        schema_id,
    )


def message(after: dict[str, object]) -> RawRecord:
    value = orjson.dumps({"op": "c", "after": after, "source": {"lsn": 100}})
    return RawRecord(TOPIC, 0, 0, orjson.dumps({"id": after["id"]}), value)


def test_an_existing_table_decides_what_schemaless_json_means_and_wins_over_a_declaration():
    declared = pa.schema([("id", pa.int64()), ("price", pa.string())])
    table = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("price", pa.decimal128(10, 2)),
            ("_ls_seq", pa.binary(16)),
        ]
    )
    base = DecoderConfig(schemas={"shop.items": declared}, primary_keys={"shop.items": ("id",)})
    decoder = BatchDecoders(base).for_tables({"shop.items": meta(table)})
    assert decoder.schemas["shop.items"].names == ["id", "price"]  # lakestream's columns left out
    # 12.34 as Debezium's base64 unscaled bytes: the table's scale 2 makes it a decimal
    decoded = decode_records([message({"id": 1, "price": "BNI="})], decoder)
    assert decoded.dead_letters == ()
    assert decoded.table("shop.items").rows.column("price").to_pylist()[0].as_tuple()[1:] == (
        (1, 2, 3, 4),
        -2,
    )


def test_a_value_that_does_not_fit_is_a_dead_letter_naming_the_column():
    table = pa.schema([pa.field("id", pa.int64(), nullable=False), ("price", pa.decimal128(3, 2))])
    decoder = BatchDecoders(DecoderConfig()).for_tables({"shop.items": meta(table)})
    decoded = decode_records([message({"id": 1, "price": "BNI="})], decoder)  # 12.34 > 9.99
    (dead,) = decoded.dead_letters
    assert dead.reason == "type_mismatch" and "column 'price'" in dead.error


def test_the_decoder_is_rebuilt_only_when_a_table_schema_changes():
    decoders = BatchDecoders(DecoderConfig())
    first = decoders.for_tables({"shop.items": meta(pa.schema([("id", pa.int64())]))})
    assert decoders.for_tables({"shop.items": meta(pa.schema([("id", pa.int64())]))}) is first
    wider = meta(pa.schema([("id", pa.int64()), ("note", pa.string())]), schema_id=1)
    assert decoders.for_tables({"shop.items": wider}).schemas["shop.items"].names == ["id", "note"]


def test_append_tables_and_undecodable_tables_are_left_to_embedded_schemas():
    append = meta(pa.schema([("id", pa.int64())]), key=())
    odd = meta(pa.schema([("id", pa.int64()), ("t", pa.time32("s"))]))
    decoder = BatchDecoders(DecoderConfig()).for_tables({"logs.a": append, "shop.items": odd})
    assert decoder.schemas == {}


def test_topics_route_to_their_tables():
    topics = ["db.shop.items", "db.shop.orders", "db", "__debezium-heartbeat.db", "weird"]
    config = DecoderConfig(topic_tables={"weird": "misc.weird"}, namespaces={"shop": "lake"})
    assert tables_of_topics(topics, SourceFormat.DEBEZIUM, config, {}) == {
        "lake.items",
        "lake.orders",
        "misc.weird",
    }
    json_tables = {"clicks": "logs.clicks"}
    assert tables_of_topics(["clicks", "other"], SourceFormat.JSON, config, json_tables) == {
        "logs.clicks"
    }
