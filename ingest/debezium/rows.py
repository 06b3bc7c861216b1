"""Collecting the rows of one table over a batch, column by column, before any conversion.

Values are appended to per-column Python lists while each message's ``after`` dict is still hot
in the CPU cache; the dicts are then dropped. Walking 100k retained dicts once per column later
costs more than parsing them (cache misses), and retaining them costs memory. The lists are
grouped by *layout* (one per distinct row schema met in the batch, usually one), because the
same column may be encoded differently by two schemas (say ``int32`` and then ``int64``).

Everything about a message is validated before its first value is appended, so a dead letter
never leaves half a row behind.
"""

from __future__ import annotations

from functools import lru_cache

import orjson
import pyarrow as pa

from catalog import ROW_KIND_DELETE, ROW_KIND_UPSERT
from ingest.debezium.errors import DeadLetterReason, MessageError
from ingest.debezium.fastpath import FastRows, embedded_schema, usable
from ingest.debezium.layout import Layout, UnsupportedSchema, layout_from_connect
from ingest.debezium.model import UPSERT_OPS, DecoderConfig, Origins, RawRecord

Row = dict[str, object]


class Group:
    """The rows of one table that share one layout, as one list of JSON values per column."""

    def __init__(self, layout: Layout, *, check_names: bool) -> None:
        self.layout = layout
        self.columns: list[list[object]] = [[] for _ in layout.names]
        #: (column name, append to its list): walked once per row on the hot path.
        self.appenders = tuple(zip(layout.names, [c.append for c in self.columns], strict=True))
        #: Row numbers (in the table's batch order) of this group's rows.
        self.positions: list[int] = []
        #: Set for layouts the caller configured: their messages may carry unknown columns.
        self.names = frozenset(layout.names) if check_names else None

    def check(self, row: Row) -> None:
        """Refuse a schemaless row holding columns the configured schema lacks: they would be
        lost without a word."""
        if self.names is not None and not self.names.issuperset(row):
            extra = sorted(row.keys() - self.names)
            raise MessageError(
                DeadLetterReason.SCHEMA_MISMATCH,
                f"columns {extra} are not in the configured schema",
            )


class TableRows:
    """The rows of one table collected over a batch, not yet converted."""

    def __init__(
        self, name: str, config: DecoderConfig, origins: Origins, *, blocks: bool = True
    ) -> None:
        self.name = name
        self.config = config
        #: Whether the fast path hands over the events' transaction blocks (a hold reads them).
        self.blocks = blocks
        self.primary_key: tuple[str, ...] | None = config.primary_keys.get(name)
        self.target: Layout | None = config.layouts.get(name)
        #: Groups in order of first appearance; keyed by the JSON of the row schema (None for
        #: messages without an embedded schema).
        self.groups: list[Group] = []
        self._group_of: dict[bytes | None, Group] = {}
        self._bad_schemas: dict[bytes, str] = {}
        self.kinds: list[int] = []
        self.seqs: list[bytes] = []
        #: Per row, its message's number in ``batch_origins``.
        self.origins: list[int] = []
        self.batch_origins = origins
        #: The fast path and the group its rows go to (see fast_rows / arm).
        self._fast: tuple[FastRows, Group] | None = None

    def origin(self, row: int) -> RawRecord:
        """The message row ``row`` came from."""
        return self.batch_origins.record(self.origins[row])

    def add(self, payload: Row, schema: object, seq: bytes, key: bytes | None, origin: int) -> None:
        """Validate one envelope and keep its row; raises :class:`MessageError` if it is bad."""
        kind, row = self.change(payload, key)
        group = self._group_of.get(None) if schema is None else None
        if group is None:
            group = self.group(schema)
        if group.names is not None and kind == ROW_KIND_UPSERT:
            group.check(row)
        get = row.get
        for name, append in group.appenders:
            append(get(name))
        group.positions.append(len(self.kinds))
        self.kinds.append(kind)
        self.seqs.append(seq)
        self.origins.append(origin)

    def change(self, payload: Row, key: bytes | None) -> tuple[int, Row]:
        """The row kind and the row of a change event (the key columns only for a delete)."""
        op = payload.get("op")
        if op in UPSERT_OPS:
            row = payload.get("after")
            if type(row) is not dict:
                raise MessageError(DeadLetterReason.MISSING_ROW, f"op {op!r} without 'after'")
            if self.primary_key is None:
                self.key_columns(key)
            return ROW_KIND_UPSERT, row
        if op == "d":
            return ROW_KIND_DELETE, self.delete_row(payload.get("before"), key)
        if op == "t":
            raise MessageError(DeadLetterReason.UNSUPPORTED_OP, "truncate events are not applied")
        raise MessageError(DeadLetterReason.UNKNOWN_OP, f"unknown op {op!r}")

    def fast_rows(self) -> FastRows | None:
        """The msgspec fast path (:mod:`ingest.debezium.fastpath`) for this table: for messages
        with the embedded schema last met (see :meth:`arm`), else for schemaless messages when
        a schema is configured; available once the primary key is known."""
        if self._fast is None and self.target is not None and self.primary_key is not None:
            names = tuple(self.target.names)
            if usable(names):
                self._fast = FastRows(names, blocks=self.blocks), self.group(None)
        return None if self._fast is None else self._fast[0]

    def arm(self, value: bytes, schema: object) -> None:
        """Let the fast path take the next messages with the embedded schema of ``value``, a
        message :meth:`add` just kept under ``schema`` (its parsed form)."""
        if self.primary_key is None:
            return
        current = self._fast[0].schema if self._fast is not None else None
        raw = embedded_schema(value)
        if raw is None or raw == current:
            return
        group = self.group(schema)
        names = tuple(group.layout.names)
        if usable(names):
            self._fast = FastRows(names, raw, blocks=self.blocks), group

    def extend_fast(
        self, values: list[tuple[object, ...]], seqs: list[bytes], origins: list[int]
    ) -> None:
        """Keep rows decoded by the fast path (upserts, in its group's column order)."""
        assert self._fast is not None, "fast rows come from the fast path"
        group = self._fast[1]
        first, count = len(self.kinds), len(values)
        for column, column_values in zip(group.columns, zip(*values, strict=True), strict=True):
            column.extend(column_values)
        group.positions.extend(range(first, first + count))
        self.kinds.extend([ROW_KIND_UPSERT] * count)
        self.seqs.extend(seqs)
        self.origins.extend(origins)

    def key_columns(self, key: bytes | None) -> tuple[str, ...]:
        """The primary key: configured, else learnt from the first message key of the batch."""
        if self.primary_key is None and key:
            names, _ = parse_key(key)
            if names:
                self.primary_key = names
        return self.primary_key or ()

    def delete_row(self, before: object, key: bytes | None) -> Row:
        """The key columns of a delete, from ``before`` or else from the message key.

        Only key columns are taken: with PostgreSQL's default replica identity the other columns
        of ``before`` are nulls or placeholders, so a delete row holds nulls there.
        """
        key_columns = self.key_columns(key)
        if not key_columns:
            raise MessageError(
                DeadLetterReason.MISSING_KEY,
                f"delete on {self.name} whose primary key is unknown (no message key, none "
                "configured)",
            )
        if before is not None and type(before) is not dict:
            raise MessageError(DeadLetterReason.BAD_ENVELOPE, "'before' is not an object")
        row: Row = {}
        key_values: Row | None = None
        for column in key_columns:
            value = before.get(column) if before else None
            if value is None:
                key_values = parse_key(key)[1] if key_values is None else key_values
                value = key_values.get(column)
            if value is None:
                raise MessageError(
                    DeadLetterReason.MISSING_KEY, f"delete without a value for key {column!r}"
                )
            row[column] = value
        return row

    def group(self, schema: object) -> Group:
        """The group of the message's row schema, created on first sight."""
        key = None if schema is None else _row_schema_key(schema)
        found = self._group_of.get(key)
        if found is None:
            found = self._group_of[key] = self._new_group(key)
            self.groups.append(found)
        return found

    def _new_group(self, key: bytes | None) -> Group:
        if key is not None:
            return Group(self._derive(key), check_names=False)
        if self.target is None:
            raise MessageError(
                DeadLetterReason.NO_SCHEMA,
                f"message without an embedded schema and no schema configured for {self.name}",
            )
        return Group(self.target, check_names=True)

    def _derive(self, key: bytes) -> Layout:
        if key in self._bad_schemas:
            raise MessageError(DeadLetterReason.UNSUPPORTED_SCHEMA, self._bad_schemas[key])
        try:
            return _connect_layout(key, self.config.variable_scale_decimal)
        except (UnsupportedSchema, ValueError, pa.ArrowException) as exc:
            error = self._bad_schemas[key] = f"cannot map the embedded schema: {exc}"
            raise MessageError(DeadLetterReason.UNSUPPORTED_SCHEMA, error) from None


@lru_cache(maxsize=512)
def _connect_layout(row_schema: bytes, variable_scale: tuple[int, int]) -> Layout:
    """Derived layouts are cached by the schema's JSON: a batch repeats one schema many times."""
    return layout_from_connect(orjson.loads(row_schema), variable_scale)


def _row_schema_key(schema: object) -> bytes:
    """The JSON of the ``after`` field schema: identifies the row schema of an envelope."""
    fields = schema.get("fields") if type(schema) is dict else None
    if type(fields) is list:
        for field in fields:
            if type(field) is dict and field.get("field") == "after":
                return orjson.dumps(field)
    raise MessageError(DeadLetterReason.BAD_ENVELOPE, "the embedded schema has no 'after' field")


def parse_key(key: bytes | None) -> tuple[tuple[str, ...], Row]:
    """Key column names and values of a message key, with or without an embedded schema."""
    if not key:
        return (), {}
    try:
        document = orjson.loads(key)
    except orjson.JSONDecodeError as exc:
        raise MessageError(DeadLetterReason.BAD_KEY, f"malformed key JSON: {exc}") from None
    names: tuple[str, ...] | None = None
    if type(document) is dict and "payload" in document and "schema" in document:
        schema, document = document["schema"], document["payload"]
        fields = schema.get("fields") if type(schema) is dict else None
        if type(fields) is list:
            names = tuple(str(f.get("field")) for f in fields if type(f) is dict)
    if type(document) is not dict:
        raise MessageError(DeadLetterReason.BAD_KEY, "the message key is not a JSON object")
    return (names if names is not None else tuple(document)), document
