"""Table schemas: validation at table creation, and their storage as Arrow IPC bytes."""

from __future__ import annotations

import base64
from collections.abc import Sequence

import pyarrow as pa

from catalog.errors import SchemaError
from catalog.names import check_column_name, check_key_column_name
from catalog.partitioning import check_partition_type

#: Types a primary-key column may have: hashable to a bucket from a canonical byte encoding.
_KEY_TYPES = (
    pa.types.is_integer,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_binary,
    pa.types.is_large_binary,
    pa.types.is_fixed_size_binary,
    pa.types.is_date,
    pa.types.is_timestamp,
    pa.types.is_decimal,
    pa.types.is_boolean,
)


def serialize(schema: pa.Schema) -> bytes:
    return bytes(schema.serialize())


def deserialize(data: bytes) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(data))


def to_base64(schema: pa.Schema) -> str:
    """A schema as text, to travel inside JSON commit requests."""
    return base64.b64encode(serialize(schema)).decode("ascii")


def from_base64(text: str) -> pa.Schema:
    return deserialize(base64.b64decode(text))


def prepare_table_schema(
    schema: pa.Schema,
    *,
    table: str,
    primary_key: Sequence[str],
    partition_by: Sequence[str],
    sequence_column: str | None = None,
) -> pa.Schema:
    """Validate a new table's schema; return it with primary-key columns made non-nullable."""
    if not isinstance(schema, pa.Schema):
        raise SchemaError(
            f"schema must be a pyarrow.Schema, got {type(schema).__name__}", table=table
        )
    if len(schema) == 0:
        raise SchemaError("a table needs at least one column", table=table)
    names = [check_column_name(f.name) for f in schema]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SchemaError(f"columns named more than once: {duplicates}", table=table)
    for column in primary_key:
        _check_key_column(schema, column, table)
    for column in partition_by:
        check_key_column_name(column, "partition")
        field = _field(schema, column, table, "partition")
        check_partition_type(column, field.type)
    if sequence_column is not None:
        if not primary_key:
            raise SchemaError("a sequence column needs a primary key", table=table)
        _field(schema, sequence_column, table, "sequence")
    fields = [f.with_nullable(False) if f.name in primary_key else f for f in schema]
    return pa.schema(fields, metadata=schema.metadata)


def _check_key_column(schema: pa.Schema, column: str, table: str) -> None:
    check_key_column_name(column, "primary-key")
    field = _field(schema, column, table, "primary-key")
    if not any(check(field.type) for check in _KEY_TYPES):
        raise SchemaError(
            f"primary-key column {column!r} has type {field.type}, which cannot be a key",
            table=table,
            column=column,
        )


def _field(schema: pa.Schema, column: str, table: str, role: str) -> pa.Field:
    index = schema.get_field_index(column)
    if index < 0:
        raise SchemaError(
            f"{role} column {column!r} is not in the schema", table=table, column=column
        )
    return schema.field(index)
