"""Iceberg field ids, name mapping and partition specs derived from a table's schema history."""

from __future__ import annotations

import datetime as dt
import uuid

import pyarrow as pa
from pyiceberg.transforms import BucketTransform, IdentityTransform

from catalog.iceberg.schema import (
    INTERNAL_FIELD_IDS,
    field_ids,
    iceberg_schema,
    name_mapping,
    partition_spec,
    partition_values,
)
from catalog.meta import TableMeta
from catalog.names import TableName
from catalog.partitioning import PartitionSpec

V0 = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("day", pa.date32()),
        ("tags", pa.list_(pa.string())),
        ("_ls_seq", pa.binary(16)),
    ]
)
V1 = pa.schema([*V0, ("addr", pa.struct([("city", pa.string()), ("zip", pa.string())]))])
V2 = pa.schema([f for f in V1 if f.name != "tags"] + [pa.field("note", pa.string())])


def meta(schemas: dict[int, pa.Schema], key: tuple[str, ...] = ("id",)) -> TableMeta:
    return TableMeta(
        table_id=uuid.UUID(int=7),
        name=TableName("shop", "orders"),
        location="/nowhere",
        spec=PartitionSpec(("day",), 4),
        primary_key=key,
        properties={},
        schemas=schemas,
        current_schema_id=max(schemas),
    )


def test_a_column_keeps_its_id_through_schema_evolution() -> None:
    assert field_ids({0: V0}) == {"id": 1, "day": 2, "tags": 3, "tags.element": 4}
    later = field_ids({0: V0, 1: V1, 2: V2})
    assert later == {
        "id": 1,
        "day": 2,
        "tags": 3,
        "tags.element": 4,
        "addr": 5,
        "addr.city": 6,
        "addr.zip": 7,
        "note": 8,  # tags was dropped: its ids are never reused
    }


def test_schema_and_mapping_carry_the_same_ids_and_hide_internal_columns() -> None:
    table = meta({0: V0, 1: V1, 2: V2})
    schema = iceberg_schema(table)
    assert [(f.name, f.field_id) for f in schema.fields] == [
        ("id", 1),
        ("day", 2),
        ("addr", 5),
        ("note", 8),
    ]
    assert schema.schema_id == 2
    mapped = {f.names[0]: f.field_id for f in name_mapping(table).root}
    assert mapped == {
        "id": 1,
        "day": 2,
        "addr": 5,
        "note": 8,
        "_ls_seq": INTERNAL_FIELD_IDS["_ls_seq"],
        "_ls_kind": INTERNAL_FIELD_IDS["_ls_kind"],
        "_ls_unset": INTERNAL_FIELD_IDS["_ls_unset"],
    }


def test_range_columns_are_identity_fields_and_a_one_column_key_is_bucketed() -> None:
    table = meta({0: V0})
    spec = partition_spec(table)
    assert [(f.name, f.source_id, type(f.transform)) for f in spec.fields] == [
        ("day", 2, IdentityTransform),
        ("id_bucket", 1, BucketTransform),
    ]
    desc = table.spec.desc({"day": dt.date(1970, 1, 11)}, bucket=3)
    assert partition_values(table, desc, spec, iceberg_schema(table)) == [10, 3]


def test_a_composite_key_chains_the_hash_so_its_buckets_are_not_exposed() -> None:
    table = meta({0: V0}, key=("id", "day"))
    assert [f.name for f in partition_spec(table).fields] == ["day"]
