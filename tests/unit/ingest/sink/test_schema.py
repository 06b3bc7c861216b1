"""How the ingest sink follows a source's schema: widen what it can, refuse the rest clearly."""

from __future__ import annotations

import uuid

import pyarrow as pa

from catalog.meta import TableMeta
from catalog.names import TableName
from catalog.partitioning import PartitionSpec
from ingest.sink.report import merge_offsets
from ingest.sink.task import widen_schema

TABLE = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("qty", pa.int32()), ("note", pa.string())]
)


def meta(schema: pa.Schema = TABLE) -> TableMeta:
    return TableMeta(
        uuid.uuid4(),
        TableName("shop", "items"),
        "/tmp/x",
        PartitionSpec((), 2),
        ("id",),
        {},
        {0: schema},
        0,
    )


def test_new_columns_and_widenings_are_followed():
    source = pa.schema([("id", pa.int64()), ("qty", pa.int64()), ("price", pa.float64())])
    union, refused = widen_schema(meta(), [source])
    assert refused is None
    assert union.names == ["id", "qty", "note", "price"]  # 'note' stays though not sent
    assert union.field("qty").type == pa.int64() and union.field("price").nullable


def test_a_narrower_source_type_keeps_the_table_type():
    union, refused = widen_schema(meta(), [pa.schema([("qty", pa.int16())])])
    assert refused is None and union.equals(TABLE)


def test_an_incompatible_change_is_refused_naming_table_and_column():
    union, refused = widen_schema(meta(), [pa.schema([("qty", pa.string())])])
    assert union.equals(TABLE)
    assert refused is not None
    column, reason = refused
    assert column == "qty" and "shop.items" in reason and "int32" in reason


def test_several_tasks_widen_to_the_widest():
    union, _ = widen_schema(
        meta(), [pa.schema([("qty", pa.int64())]), pa.schema([("extra", pa.string())])]
    )
    assert union.field("qty").type == pa.int64() and "extra" in union.names


def test_offsets_merge_to_the_furthest_per_partition():
    merged = merge_offsets({"t": {"0": 5, "1": 9}}, {"t": {"0": 7}}, {"u": {"0": 1}})
    assert merged == {"t": {"0": 7, "1": 9}, "u": {"0": 1}}
