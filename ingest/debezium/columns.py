"""Building a table's Arrow columns from the collected JSON values, once per batch.

Each column's list goes to its codec in one call. Only when a codec rejects a column are its
values checked one by one, so that just the bad rows become dead letters and the rest of the
batch goes through. Groups of different layouts that unify (see :mod:`ingest.debezium.unify`)
are cast to the unified types and concatenated, then put back in batch order.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from catalog import ROW_KIND_COLUMN, UNSET_COLUMN, UNSET_TYPE
from ingest.debezium.codecs import BUILD_ERRORS, Codec
from ingest.debezium.errors import DeadLetterReason
from ingest.debezium.model import DeadLetter, DecodedTable
from ingest.debezium.placeholders import placeholder_rows, placeholders_of
from ingest.debezium.position import SEQ_COLUMN, SEQ_WIDTH
from ingest.debezium.rows import Group, TableRows
from ingest.debezium.unify import unify_schemas

#: Why rows failed when their columns were built: reason and text, by position in their group.
BadRows = dict[int, tuple[DeadLetterReason, str]]
#: Per row of a group (by position), the columns its change left out (Debezium placeholders).
UnsetRows = dict[int, list[str]]
#: The rows of one group that survived (table row numbers), their arrays by column name, and
#: per surviving row the columns it left out (None when no row left any out).
_Part = tuple[list[int], dict[str, pa.Array], list[list[str] | None] | None]

_KIND_FIELD = pa.field(ROW_KIND_COLUMN, pa.int8(), nullable=False)
_SEQ_FIELD = pa.field(SEQ_COLUMN, pa.binary(SEQ_WIDTH), nullable=False)
UNAVAILABLE_KEY = "a primary-key column holds Debezium's placeholder for a value it did not send"


def decode_table(rows: TableRows) -> tuple[list[DecodedTable], list[DeadLetter]]:
    """The table's decoded segments (usually one) and the rows that failed as dead letters."""
    tables: list[DecodedTable] = []
    dead: list[DeadLetter] = []
    key = rows.primary_key or ()
    for schema, groups in segments(rows.groups):
        parts = [_decode_group(rows, group, key, dead) for group in groups]
        table = _assemble(rows, schema, parts)
        if table.num_rows:
            tables.append(DecodedTable(rows.name, table, key, schema))
    return tables, dead


def segments(groups: list[Group]) -> list[tuple[pa.Schema, list[Group]]]:
    """Group the layouts (in order of first appearance) into segments whose schemas unify."""
    found: list[tuple[pa.Schema, list[Group]]] = []
    for group in groups:
        for number, (schema, members) in enumerate(found):
            unified = unify_schemas(schema, group.layout.schema)
            if unified is not None:
                found[number] = (unified, [*members, group])
                break
        else:
            found.append((group.layout.schema, [group]))
    return found


def _decode_group(
    rows: TableRows, group: Group, key: tuple[str, ...], dead: list[DeadLetter]
) -> _Part:
    arrays, bad, unset = decode_columns(group, key)
    for position, (reason, error) in sorted(bad.items()):
        origin = rows.origin(group.positions[position])
        dead.append(DeadLetter.of(origin, reason, error, rows.name))
    survivors = range(len(group.positions))
    unset_lists = [unset.get(i) for i in survivors if i not in bad] if unset else None
    if not bad:
        return group.positions, arrays, unset_lists
    kept = [p for i, p in enumerate(group.positions) if i not in bad]
    return kept, arrays, unset_lists


def _assemble(rows: TableRows, schema: pa.Schema, parts: list[_Part]) -> pa.Table:
    columns = [
        _concat([_fit(arrays.get(f.name), f.type, len(kept)) for kept, arrays, _ in parts])
        for f in schema
    ]
    kept = parts[0][0] if len(parts) == 1 else [p for part, _, _ in parts for p in part]
    # One part keeps increasing row numbers: as many as the table has means every row.
    everything = len(parts) == 1 and len(kept) == len(rows.kinds)
    kinds = rows.kinds if everything else [rows.kinds[i] for i in kept]
    seqs = rows.seqs if everything else [rows.seqs[i] for i in kept]
    columns.append(pa.array(kinds, type=pa.int8()))
    data = pa.py_buffer(b"".join(seqs))
    columns.append(pa.Array.from_buffers(pa.binary(SEQ_WIDTH), len(seqs), [None, data]))
    fields = [f.with_nullable(True) for f in schema] + [_KIND_FIELD, _SEQ_FIELD]
    if any(unset is not None for _, _, unset in parts):
        lists = [x for kept, _, unset in parts for x in (unset or [None] * len(kept))]
        columns.append(pa.array(lists, UNSET_TYPE))
        fields.append(pa.field(UNSET_COLUMN, UNSET_TYPE))
    table = pa.Table.from_arrays(columns, schema=pa.schema(fields))
    if len(parts) > 1:
        table = table.take(pc.sort_indices(pa.array(kept, type=pa.int64())))
    return table


def _fit(array: pa.Array | None, kind: pa.DataType, length: int) -> pa.Array:
    if array is None:
        return pa.nulls(length, type=kind)
    return array if array.type == kind else array.cast(kind)


def _concat(arrays: list[pa.Array]) -> pa.Array:
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


@dataclass
class _Failed:
    name: str
    codec: Codec
    values: list[object]


def decode_columns(
    group: Group, key: tuple[str, ...]
) -> tuple[dict[str, pa.Array], BadRows, UnsetRows]:
    """Every column of the group as an array, the rows that failed (left out of the arrays),
    and the rows whose change left columns out (their values are null in the arrays).

    A row fails when a value does not fit its column or a primary-key value is null or left out.
    A value left out is Debezium's placeholder for an unchanged TOASTed column: the row becomes
    a partial change, completed from the key's previous change when merged
    (:mod:`catalog.files.partial`).
    """
    bad: BadRows = {}
    unset: UnsetRows = {}
    arrays: dict[str, pa.Array] = {}
    failed: list[_Failed] = []
    layout = group.layout
    for name, codec, values in zip(layout.names, layout.codecs, group.columns, strict=True):
        if name in key and None in values:
            _null_keys(name, values, bad)
        for position in placeholder_rows(values, placeholders_of(codec)):
            if name in key:
                bad.setdefault(position, (DeadLetterReason.UNAVAILABLE_VALUE, UNAVAILABLE_KEY))
            values[position] = None
            unset.setdefault(position, []).append(name)
        try:
            arrays[name] = codec.build(values)
        except BUILD_ERRORS:
            failed.append(_Failed(name, codec, values))
    for column in key:
        if column not in layout.names:
            _null_keys(column, [None] * len(group.positions), bad)
    for failure in failed:
        _bad_values(failure, bad)
    if not bad:
        return arrays, bad, unset
    return _without(arrays, failed, bad, len(group.positions)), bad, unset


def _without(
    arrays: dict[str, pa.Array], failed: list[_Failed], bad: BadRows, length: int
) -> dict[str, pa.Array]:
    keep = pa.array([i not in bad for i in range(length)], type=pa.bool_())
    kept = {name: array.filter(keep) for name, array in arrays.items()}
    for failure in failed:
        values = [value for i, value in enumerate(failure.values) if i not in bad]
        kept[failure.name] = failure.codec.build(values)
    return kept


def _null_keys(column: str, values: list[object], bad: BadRows) -> None:
    for position, value in enumerate(values):
        if value is None:
            error = f"primary key column {column!r} is null"
            bad.setdefault(position, (DeadLetterReason.MISSING_KEY, error))


def _bad_values(failure: _Failed, bad: BadRows) -> None:
    """Find the values a codec rejected: first with the strict per-value check, else by building
    each value alone (the fast path may reject what the check accepts), else blame every row:
    a column that cannot be built must never take the batch down."""
    codec = failure.codec
    for check in (codec.convert, lambda value: codec.build([value])):
        found = False
        for position, value in enumerate(failure.values):
            if value is None or position in bad:
                continue
            try:
                check(value)
            except BUILD_ERRORS as exc:
                bad[position] = (DeadLetterReason.TYPE_MISMATCH, f"column {failure.name!r}: {exc}")
                found = True
        if found:
            return
    try:
        codec.build([v for i, v in enumerate(failure.values) if i not in bad])
    except BUILD_ERRORS as exc:
        error = f"column {failure.name!r} cannot be built: {exc}"
        for position in range(len(failure.values)):
            bad.setdefault(position, (DeadLetterReason.TYPE_MISMATCH, error))
