"""Unifying the schemas that messages of one table carry within one batch.

When a column is added (or widened) while a batch is in flight, the batch holds messages with
the old and the new schema. They are unified into the *widest* schema: the columns of the first
schema in order, then new columns in the order they first appear; a column missing from some
messages is nullable and null in their rows; a column whose type changed takes the wider type
when the widening is lossless (below). Rows keep their batch order.

Lossless widenings: a wider signed integer; ``float32`` to ``float64``; a decimal that holds both
(more integer digits and/or more fractional digits, within 38 resp. 76 digits); ``string`` to
``large_string`` and ``binary`` to ``large_binary``; lists, maps and structs element-wise
(structs also by adding fields). Anything else (say ``int64`` to ``string``) cannot be unified:
the batch then carries the table in several :class:`~ingest.debezium.model.DecodedTable`
segments, one per group of schemas that unify, so the caller sees the incompatible change itself
and decides; the decoder never guesses a lossy conversion.
"""

from __future__ import annotations

import pyarrow as pa

_INT_ORDER = (pa.int8(), pa.int16(), pa.int32(), pa.int64())


def unify_schemas(first: pa.Schema, second: pa.Schema) -> pa.Schema | None:
    """The widest schema holding both, or ``None`` if some column cannot be widened."""
    fields = _unify_fields(list(first), list(second))
    return None if fields is None else pa.schema(fields)


def _unify_fields(first: list[pa.Field], second: list[pa.Field]) -> list[pa.Field] | None:
    later = {field.name: field for field in second}
    earlier = {field.name for field in first}
    merged: list[pa.Field] = []
    for field in first:
        other = later.get(field.name)
        if other is None:
            merged.append(field.with_nullable(True))
            continue
        unified = unify_fields(field, other)
        if unified is None:
            return None
        merged.append(unified)
    merged.extend(f.with_nullable(True) for f in second if f.name not in earlier)
    return merged


def unify_fields(first: pa.Field, second: pa.Field) -> pa.Field | None:
    """One field holding both; the later field's metadata wins (it describes the newer data)."""
    kind = widen_type(first.type, second.type)
    if kind is None:
        return None
    metadata = second.metadata if second.metadata else first.metadata
    return pa.field(first.name, kind, first.nullable or second.nullable, metadata)


def widen_type(first: pa.DataType, second: pa.DataType) -> pa.DataType | None:
    """The narrowest type both convert to without loss, or ``None``."""
    if first == second:
        return first
    for widen in (_widen_int, _widen_float, _widen_decimal, _widen_large, _widen_nested):
        widened = widen(first, second)
        if widened is not None:
            return widened
    return None


def _widen_int(first: pa.DataType, second: pa.DataType) -> pa.DataType | None:
    if first in _INT_ORDER and second in _INT_ORDER:
        return max(first, second, key=_INT_ORDER.index)
    return None


def _widen_float(first: pa.DataType, second: pa.DataType) -> pa.DataType | None:
    floats = (pa.float32(), pa.float64())
    return pa.float64() if first in floats and second in floats else None


def _widen_decimal(first: pa.DataType, second: pa.DataType) -> pa.DataType | None:
    if not (pa.types.is_decimal(first) and pa.types.is_decimal(second)):
        return None
    scale = max(first.scale, second.scale)
    precision = scale + max(first.precision - first.scale, second.precision - second.scale)
    wide = pa.types.is_decimal256(first) or pa.types.is_decimal256(second) or precision > 38
    if precision > 76:
        return None
    return (pa.decimal256 if wide else pa.decimal128)(precision, scale)


def _widen_large(first: pa.DataType, second: pa.DataType) -> pa.DataType | None:
    for small, large in ((pa.string(), pa.large_string()), (pa.binary(), pa.large_binary())):
        if {first, second} == {small, large}:
            return large
    return None


def _widen_nested(first: pa.DataType, second: pa.DataType) -> pa.DataType | None:
    if pa.types.is_list(first) and pa.types.is_list(second):
        item = unify_fields(first.value_field, second.value_field)
        return None if item is None else pa.list_(item)
    if pa.types.is_struct(first) and pa.types.is_struct(second):
        fields = _unify_fields(list(first), list(second))
        return None if fields is None else pa.struct(fields)
    if pa.types.is_map(first) and pa.types.is_map(second):
        key = widen_type(first.key_type, second.key_type)
        item = widen_type(first.item_type, second.item_type)
        return None if key is None or item is None else pa.map_(key, item)
    return None
