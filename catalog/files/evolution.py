"""Schema evolution: which schema changes are allowed, and reading old files under a new schema.

Columns are matched by name (as Paimon and Delta without column mapping do), so a rename reads
as a drop plus an add. Allowed changes, each readable from files written before it:

* add a nullable column (top level or inside a struct): old files read it as null;
* drop a column, only when the caller explicitly allows it (the source said so): old files'
  values are omitted;
* make a required column nullable;
* widen a type, exactly (every old value is representable, no rounding, no overflow):

  - signed ints to wider signed ints, unsigned ints to wider unsigned or strictly wider signed;
  - ints of up to 16 bits to float32, of up to 32 bits to float64; float16 -> float32 -> float64;
  - decimal(p, s) -> decimal(p', s') with s' >= s and p' - s' >= p - s (any storage width);
    an int to a decimal with at least as many integer digits as the int type has;
  - string <-> large_string <-> string_view, binary <-> large_binary <-> binary_view,
    date32 <-> date64, dictionary<T> -> T (same values, another representation);
  - time and timestamp to a finer unit up to microseconds (same time zone);
  - the null type to any type; list<T> -> list<T'> and struct fields by the same rules.

Everything else is refused: narrowing, other type changes, a nullable column made required, a
new required column (old files have no value for it), any change to a primary-key column, a new
column with the reserved ``_ls_`` prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import pyarrow as pa
import pyarrow.compute as pc

from catalog.errors import SchemaError

RESERVED_PREFIX = "_ls_"

_INT_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}
_UNSIGNED_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}
_UNIT_RANK = {"s": 0, "ms": 1, "us": 2, "ns": 3}


class ChangeKind(StrEnum):
    ADD_COLUMN = "add_column"
    DROP_COLUMN = "drop_column"
    WIDEN_TYPE = "widen_type"
    CHANGE_TYPE = "change_type"
    MAKE_NULLABLE = "make_nullable"
    MAKE_REQUIRED = "make_required"


@dataclass(frozen=True)
class Change:
    """One difference between two schemas and whether it may be applied."""

    kind: ChangeKind
    column: str
    """Dotted path for nested fields: ``address.zip``; ``items.element`` for list values."""
    allowed: bool
    reason: str
    old_type: pa.DataType | None = None
    new_type: pa.DataType | None = None

    def message(self, table: str | None = None) -> str:
        where = f"table {table!r}, " if table else ""
        verdict = "allowed" if self.allowed else "refused"
        return f"{where}column {self.column!r}: {self.kind.value} {verdict}: {self.reason}"


# ------------------------------------------------------------------------ type widening


def _representation(t: pa.DataType) -> str | None:
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "binary"
    if pa.types.is_date(t):
        return "date"
    return None


def _int_widening(old: pa.DataType, new: pa.DataType) -> bool:
    old_signed = pa.types.is_signed_integer(old)
    if pa.types.is_integer(new):
        if pa.types.is_signed_integer(new):
            return bool(new.bit_width > old.bit_width)
        return bool(not old_signed and new.bit_width >= old.bit_width)
    if pa.types.is_floating(new):
        mantissa_ok = {16: 0, 32: 16, 64: 32}[new.bit_width]
        return bool(old.bit_width <= mantissa_ok)
    if pa.types.is_decimal(new):
        digits = (_INT_DIGITS if old_signed else _UNSIGNED_DIGITS)[old.bit_width]
        return bool(new.precision - new.scale >= digits)
    return False


def _decimal_widening(old: pa.DataType, new: pa.DataType) -> bool:
    return bool(
        pa.types.is_decimal(new)
        and new.scale >= old.scale
        and new.precision - new.scale >= old.precision - old.scale
    )


def _temporal_widening(old: pa.DataType, new: pa.DataType) -> bool:
    finer = _UNIT_RANK[new.unit] >= _UNIT_RANK[old.unit]
    unit_ok = finer and (new.unit != "ns" or old.unit == "ns")
    if pa.types.is_time(old):
        return pa.types.is_time(new) and unit_ok
    return bool(pa.types.is_timestamp(new) and new.tz == old.tz and unit_ok)


def is_widening(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of type ``old`` converts exactly to type ``new`` (see module doc)."""
    if pa.types.is_dictionary(old):
        old = old.value_type
    if old.equals(new) or pa.types.is_null(old):
        return True
    rep = _representation(old)
    if rep is not None:
        return rep == _representation(new)
    if pa.types.is_integer(old):
        return _int_widening(old, new)
    if pa.types.is_floating(old):
        return bool(pa.types.is_floating(new) and new.bit_width >= old.bit_width)
    if pa.types.is_decimal(old):
        return _decimal_widening(old, new)
    if pa.types.is_time(old) or pa.types.is_timestamp(old):
        return _temporal_widening(old, new)
    if _is_list(old) and _is_list(new):
        return is_widening(old.value_type, new.value_type)
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        return not any(not c.allowed for c in _struct_changes("", old, new, allow_drop=False))
    return False


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t))


# ---------------------------------------------------------------------- check_evolution


def _fields(t: pa.DataType | pa.Schema) -> dict[str, pa.Field]:
    if isinstance(t, pa.Schema):
        return {f.name: f for f in t}
    return {t.field(i).name: t.field(i) for i in range(t.num_fields)}


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _added(path: str, field: pa.Field, top_level: bool) -> Change:
    if top_level and field.name.startswith(RESERVED_PREFIX):
        reason = f"names starting with {RESERVED_PREFIX!r} are reserved for lakestream"
        return Change(ChangeKind.ADD_COLUMN, path, False, reason, new_type=field.type)
    if not field.nullable:
        reason = "a new column must be nullable: files written before have no value for it"
        return Change(ChangeKind.ADD_COLUMN, path, False, reason, new_type=field.type)
    return Change(
        ChangeKind.ADD_COLUMN, path, True, "read as null from older files", new_type=field.type
    )


def _dropped(path: str, field: pa.Field, allow_drop: bool) -> Change:
    reason = "explicitly allowed" if allow_drop else "dropping a column needs allow_drop=True"
    return Change(ChangeKind.DROP_COLUMN, path, allow_drop, reason, old_type=field.type)


def _nullability(path: str, old: pa.Field, new: pa.Field) -> list[Change]:
    if old.nullable == new.nullable:
        return []
    if new.nullable:
        return [Change(ChangeKind.MAKE_NULLABLE, path, True, "required column made nullable")]
    reason = "older files may hold nulls in a column that was nullable"
    return [Change(ChangeKind.MAKE_REQUIRED, path, False, reason)]


def _type_changes(path: str, old: pa.DataType, new: pa.DataType, allow_drop: bool) -> list[Change]:
    if old.equals(new):
        return []
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        return _struct_changes(path, old, new, allow_drop)
    if _is_list(old) and _is_list(new):
        return _type_changes(_join(path, "element"), old.value_type, new.value_type, allow_drop)
    if is_widening(old, new):
        return [
            Change(
                ChangeKind.WIDEN_TYPE,
                path,
                True,
                f"{old} widens to {new} exactly",
                old_type=old,
                new_type=new,
            )
        ]
    reason = f"{old} cannot be read as {new} without loss (narrowing or a different type)"
    return [Change(ChangeKind.CHANGE_TYPE, path, False, reason, old_type=old, new_type=new)]


def _field_changes(path: str, old: pa.Field, new: pa.Field, allow_drop: bool) -> list[Change]:
    return _type_changes(path, old.type, new.type, allow_drop) + _nullability(path, old, new)


def _struct_changes(
    prefix: str, old: pa.DataType | pa.Schema, new: pa.DataType | pa.Schema, allow_drop: bool
) -> list[Change]:
    old_fields, new_fields = _fields(old), _fields(new)
    top = isinstance(new, pa.Schema)
    changes: list[Change] = []
    for name, field in old_fields.items():
        path = _join(prefix, name)
        if name not in new_fields:
            changes.append(_dropped(path, field, allow_drop))
        else:
            changes.extend(_field_changes(path, field, new_fields[name], allow_drop))
    changes.extend(
        _added(_join(prefix, name), field, top)
        for name, field in new_fields.items()
        if name not in old_fields
    )
    return changes


def _protect_primary_key(change: Change, primary_key: Sequence[str]) -> Change:
    root = change.column.split(".", 1)[0]
    if root not in primary_key or not change.allowed:
        return change
    reason = "primary-key columns cannot change (it would change bucketing and merge order)"
    return Change(change.kind, change.column, False, reason, change.old_type, change.new_type)


def check_evolution(
    old: pa.Schema,
    new: pa.Schema,
    *,
    primary_key: Sequence[str] = (),
    allow_drop: bool = False,
) -> list[Change]:
    """Every difference from ``old`` to ``new``, each classified as allowed or refused.

    Pure; field order and metadata are ignored (columns are matched by name). An empty list
    means the schemas are equivalent. Pass the list to :func:`require_allowed` to refuse.
    """
    changes = _struct_changes("", old, new, allow_drop)
    return [_protect_primary_key(c, primary_key) for c in changes]


def require_allowed(changes: Sequence[Change], *, table: str | None = None) -> None:
    """Raise :class:`SchemaError` naming the table and column of the first refused change."""
    refused = [c for c in changes if not c.allowed]
    if refused:
        first = refused[0]
        more = f" (and {len(refused) - 1} more refused change(s))" if len(refused) > 1 else ""
        raise SchemaError(first.message(table) + more, table=table, column=first.column)


# ------------------------------------------------------------------------ align on read


def _refuse(path: str, old: pa.DataType, new: pa.DataType) -> SchemaError:
    return SchemaError(f"column {path!r}: data of type {old} cannot be read as {new}", column=path)


def _align_struct(arr: pa.StructArray, target: pa.StructType, path: str) -> pa.Array:
    if arr.offset:
        arr = pa.concat_arrays([arr])  # drop the offset, so field() children line up
    names = {arr.type.field(i).name for i in range(arr.type.num_fields)}
    children = [
        _align_array(arr.field(f.name), f, _join(path, f.name))
        if f.name in names
        else _missing(len(arr), f, _join(path, f.name))
        for f in (target.field(i) for i in range(target.num_fields))
    ]
    fields = [target.field(i) for i in range(target.num_fields)]
    mask = arr.is_null() if arr.null_count else None
    return pa.StructArray.from_arrays(children, fields=fields, mask=mask)


def _align_array(arr: pa.Array, target: pa.Field, path: str) -> pa.Array:
    if pa.types.is_dictionary(arr.type) and not pa.types.is_dictionary(target.type):
        arr = arr.dictionary_decode()
    if not arr.type.equals(target.type):
        if pa.types.is_struct(arr.type) and pa.types.is_struct(target.type):
            arr = _align_struct(arr, target.type, path)
        elif is_widening(arr.type, target.type):
            arr = pc.cast(arr, target.type)
        else:
            raise _refuse(path, arr.type, target.type)
    if not target.nullable and arr.null_count:
        raise SchemaError(f"column {path!r} is required but the data holds nulls", column=path)
    return arr


def _missing(length: int, target: pa.Field, path: str) -> pa.Array:
    if not target.nullable:
        raise SchemaError(f"column {path!r} is required but missing from the data", column=path)
    return pa.nulls(length, target.type)


def _align_column(
    column: pa.Array | pa.ChunkedArray, target: pa.Field
) -> pa.Array | pa.ChunkedArray:
    if isinstance(column, pa.ChunkedArray):
        chunks = [_align_array(c, target, target.name) for c in column.chunks]
        return pa.chunked_array(chunks, type=target.type)
    return _align_array(column, target, target.name)


def align_to_schema(
    data: pa.RecordBatch | pa.Table, target: pa.Schema
) -> pa.RecordBatch | pa.Table:
    """``data`` (written under an older schema) as it reads under ``target``.

    Columns are matched by name: a column missing from ``data`` is filled with nulls (refused if
    the target column is required), a column of an older type is cast when the change is a
    widening (see the module doc), columns not in ``target`` are left out. Anything else raises
    :class:`SchemaError` naming the column. Returns the same kind (batch or table) as ``data``.
    """
    if data.schema.equals(target, check_metadata=False):
        return data
    present = set(data.schema.names)
    columns = [
        _align_column(data.column(f.name), f)
        if f.name in present
        else _missing(data.num_rows, f, f.name)
        for f in target
    ]
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatch.from_arrays(columns, schema=target)
    return pa.Table.from_arrays(
        [c if isinstance(c, pa.ChunkedArray) else pa.chunked_array([c], c.type) for c in columns],
        schema=target,
    )
