"""Iceberg field ids of a table's columns, from its schema history alone (no pyiceberg).

Walking the schemas in id order, each column gets the next ids the first time its name appears
(its own id, then its nested fields' ids, depth first: a list's ``element``, a map's ``key`` and
``value``, a struct's fields). A column keeps its id for ever after: schema evolution only adds
columns, widens types or drops them, and a dropped name can never come back (the catalog
refuses it), so a name names one column for the table's whole life. Ids therefore never change
from one export to the next, nor between two exporters.

That is what lets every Parquet file lakestream writes carry the ids (``PARQUET:field_id``, the
field metadata pyarrow turns into Parquet's field ids: :func:`with_field_ids`) without reading
Iceberg's metadata, or even having pyiceberg installed: the writers compute them from the
table's metadata, and :mod:`catalog.iceberg.schema` publishes the same ones. lakestream's own
file columns (``_ls_*``) get ids far above any user column's, which no Iceberg schema holds
(readers skip them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pyarrow as pa

from catalog.model import ROW_KIND_COLUMN, SEQUENCE_COLUMN, UNSET_COLUMN
from catalog.names import RESERVED_COLUMN_PREFIX

__all__ = ["FIELD_ID_KEY", "INTERNAL_FIELD_IDS", "children", "field_ids", "with_field_ids"]

#: The Arrow field metadata key pyarrow writes as a Parquet field id (and reads back).
FIELD_ID_KEY = b"PARQUET:field_id"
#: Ids of lakestream's own file columns, far above any user column's.
INTERNAL_FIELD_IDS = {
    SEQUENCE_COLUMN: 1_000_000_001,
    ROW_KIND_COLUMN: 1_000_000_002,
    UNSET_COLUMN: 1_000_000_003,
    f"{UNSET_COLUMN}.element": 1_000_000_004,
}


def field_ids(schemas: Mapping[int, pa.Schema]) -> dict[str, int]:
    """Path of every user field ever seen (``a``, ``a.element``, ``s.x``) -> its field id."""
    ids: dict[str, int] = {}
    for schema_id in sorted(schemas):
        for field in schemas[schema_id]:
            if field.name.startswith(RESERVED_COLUMN_PREFIX) or field.name in ids:
                continue
            for path in _paths(field.name, field.type):
                ids[path] = len(ids) + 1
    return ids


def _paths(path: str, arrow_type: pa.DataType) -> Iterator[str]:
    yield path
    for name, child in children(arrow_type):
        yield from _paths(f"{path}.{name}", child)


def children(arrow_type: pa.DataType) -> list[tuple[str, pa.DataType]]:
    """Nested fields under Iceberg's names: a list's ``element``, a map's ``key``/``value``."""
    if pa.types.is_struct(arrow_type):
        return [
            (arrow_type.field(i).name, arrow_type.field(i).type)
            for i in range(arrow_type.num_fields)
        ]
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return [("element", arrow_type.value_type)]
    if pa.types.is_map(arrow_type):
        return [("key", arrow_type.key_type), ("value", arrow_type.item_type)]
    return []


def with_field_ids(schema: pa.Schema, ids: Mapping[str, int]) -> pa.Schema:
    """``schema`` with each field's id (``ids``, plus :data:`INTERNAL_FIELD_IDS`) in its
    metadata, nested fields included; a field without an id is left as it is."""
    every = {**ids, **INTERNAL_FIELD_IDS}
    fields = [_stamped(field, field.name, every) for field in schema]
    return pa.schema(fields, metadata=schema.metadata)


def _stamped(field: pa.Field, path: str, ids: Mapping[str, int]) -> pa.Field:
    kind = field.type
    if pa.types.is_struct(kind):
        kind = pa.struct(
            [
                _stamped(kind.field(i), f"{path}.{kind.field(i).name}", ids)
                for i in range(kind.num_fields)
            ]
        )
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        element = _stamped(kind.value_field, f"{path}.element", ids)
        kind = pa.list_(element) if pa.types.is_list(kind) else pa.large_list(element)
    elif pa.types.is_map(kind):
        key = _stamped(kind.key_field, f"{path}.key", ids)
        item = _stamped(kind.item_field, f"{path}.value", ids)
        kind = pa.map_(key, item, keys_sorted=kind.keys_sorted)
    stamped = field.with_type(kind)
    if path not in ids:
        return stamped
    return stamped.with_metadata({**(field.metadata or {}), FIELD_ID_KEY: str(ids[path]).encode()})
