"""What goes into the decoder and what comes out of it."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from catalog import ROW_KIND_COLUMN, UNSET_COLUMN
from ingest.debezium.errors import DeadLetterReason, DecoderConfigError
from ingest.debezium.layout import Layout, UnsupportedSchema, layout_from_arrow

if TYPE_CHECKING:
    from ingest.debezium.avro import AvroDecoding

_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")
_RESERVED_PREFIX = "_ls_"
#: Debezium ops that carry a new row image (create, snapshot read, update).
UPSERT_OPS = ("c", "r", "u")


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One Kafka message as the consumer saw it; ``key`` and ``value`` are the raw bytes."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class RecordChunk:
    """Consecutive messages of one topic-partition as parallel lists, the decoder's input.

    Built with one list comprehension per field from a consumer's messages, it costs a fraction
    of one object per message; a :class:`RawRecord` is made only for a message that becomes a
    dead letter.
    """

    topic: str
    partition: int
    offsets: Sequence[int]
    keys: Sequence[bytes | None]
    values: Sequence[bytes | None]
    timestamps_ms: Sequence[int | None]

    def __len__(self) -> int:
        return len(self.offsets)

    def record(self, index: int) -> RawRecord:
        return RawRecord(
            self.topic, self.partition, self.offsets[index], self.keys[index],
            self.values[index], self.timestamps_ms[index],
        )  # fmt: skip

    @classmethod
    def split(cls, records: Iterable[RawRecord]) -> list[RecordChunk]:
        """Records as chunks: one per run of consecutive records of the same topic-partition."""
        chunks: list[RecordChunk] = []
        for (topic, partition), run in groupby(records, key=lambda r: (r.topic, r.partition)):
            items = list(run)
            offsets, keys = [r.offset for r in items], [r.key for r in items]
            values, stamps = [r.value for r in items], [r.timestamp_ms for r in items]
            chunks.append(cls(topic, partition, offsets, keys, values, stamps))
        return chunks


class Origins:
    """Where each row of a batch came from: a row keeps one int, resolved only when needed."""

    def __init__(self) -> None:
        self._chunks: list[RecordChunk] = []
        self._starts: list[int] = []
        self.size = 0

    def add(self, chunk: RecordChunk) -> int:
        """Register a chunk; its message ``i`` is then origin ``returned + i``."""
        base = self.size
        self._chunks.append(chunk)
        self._starts.append(base)
        self.size += len(chunk)
        return base

    def record(self, origin: int) -> RawRecord:
        number = bisect_right(self._starts, origin) - 1
        return self._chunks[number].record(origin - self._starts[number])


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that could not be decoded, kept whole so it can be inspected and replayed."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: DeadLetterReason
    error: str
    table: str | None = None

    @classmethod
    def of(
        cls, record: RawRecord, reason: DeadLetterReason, error: str, table: str | None = None
    ) -> DeadLetter:
        return cls(
            record.topic, record.partition, record.offset, record.key, record.value, reason,
            error, table,
        )  # fmt: skip


@dataclass(frozen=True)
class DecodedTable:
    """The changes of one table in one batch.

    ``rows`` holds the data columns (all nullable: a delete row carries only its key), then
    ``_ls_kind`` (int8, 0 = upsert, 1 = delete) and ``_ls_seq`` (16-byte source position, see
    :mod:`ingest.debezium.position`), in batch order, and ``_ls_unset`` (the columns a row left
    out, see :mod:`ingest.debezium.placeholders`) when any row is a partial change.
    ``source_schema`` is the data columns as the source declares them (nullability, logical
    types in the field metadata): the schema a caller compares with the catalog to evolve the
    table. ``primary_key`` is empty when neither the messages' keys nor the configuration named
    one.
    """

    table: str
    rows: pa.Table
    primary_key: tuple[str, ...]
    source_schema: pa.Schema

    @property
    def upserts(self) -> int:
        return int(self.rows.num_rows - self.deletes)

    @property
    def deletes(self) -> int:
        return int(pc.sum(self.rows.column(ROW_KIND_COLUMN)).as_py() or 0)

    @property
    def partial(self) -> int:
        """Rows that left columns out (see :data:`~catalog.model.UNSET_COLUMN`)."""
        if UNSET_COLUMN not in self.rows.column_names:
            return 0
        column = self.rows.column(UNSET_COLUMN)
        return int(len(column) - column.null_count)


@dataclass(frozen=True)
class DecodedBatch:
    """Everything one call of :func:`~ingest.debezium.decode_records` produced.

    ``tables`` holds one :class:`DecodedTable` per table in order of first appearance, unless a
    column's type changed incompatibly within the batch: then that table comes in several
    segments (see :mod:`ingest.debezium.unify`), whose rows together are the table's changes.
    """

    tables: tuple[DecodedTable, ...]
    dead_letters: tuple[DeadLetter, ...]
    #: Messages of topics without row changes (heartbeats, schema changes, transactions).
    ignored: int
    #: Tombstones (null values that follow deletes for log compaction): nothing to apply.
    tombstones: int

    def table(self, name: str) -> DecodedTable:
        """The single segment of ``name``; raises ``KeyError`` if absent or split."""
        segments = self.segments(name)
        if len(segments) != 1:
            raise KeyError(f"{name!r} has {len(segments)} segments in this batch")
        return segments[0]

    def segments(self, name: str) -> tuple[DecodedTable, ...]:
        return tuple(t for t in self.tables if t.table == name)

    @property
    def table_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.table for t in self.tables))


@dataclass(frozen=True)
class DecoderConfig:
    """How to map topics to tables and what to assume when messages carry no schema.

    * ``topic_tables``: topic -> ``namespace.table``, overriding the naming convention.
    * ``namespaces``: source schema (or database) name -> namespace.
    * ``ignored_topics``: topics whose messages are counted as ignored.
    * ``schemas``: table -> Arrow schema of its data columns, for messages without an embedded
      schema. The field metadata key ``debezium.logical`` says how the JSON encodes a value where
      the Arrow type alone does not (a derived ``source_schema`` has it and can be passed back).
    * ``primary_keys``: table -> key columns; wins over the key found in the messages.
    * ``variable_scale_decimal``: (precision, scale) of ``VariableScaleDecimal`` columns.
    * ``avro``: set when an Avro converter wrote the topics (Confluent wire format): where the
      schemas of their ids are (see :mod:`ingest.debezium.avro`).
    """

    topic_tables: Mapping[str, str] = field(default_factory=dict)
    namespaces: Mapping[str, str] = field(default_factory=dict)
    ignored_topics: frozenset[str] = frozenset()
    schemas: Mapping[str, pa.Schema] = field(default_factory=dict)
    primary_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    variable_scale_decimal: tuple[int, int] = (38, 18)
    avro: AvroDecoding | None = None
    #: Derived: the layout (codecs) of every configured schema.
    layouts: Mapping[str, Layout] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Own copies (plain dicts, so that the config pickles to Spark executors), normalised
        # and checked once: a config that cannot work fails here, not per message.
        tables = {topic: _check_table(name) for topic, name in self.topic_tables.items()}
        keys = {_check_table(t): tuple(cols) for t, cols in self.primary_keys.items()}
        schemas = {_check_table(t): _data_schema(t, s) for t, s in self.schemas.items()}
        _check_variable_scale(self.variable_scale_decimal)
        object.__setattr__(self, "topic_tables", tables)
        object.__setattr__(self, "namespaces", dict(self.namespaces))
        object.__setattr__(self, "ignored_topics", frozenset(self.ignored_topics))
        object.__setattr__(self, "primary_keys", keys)
        object.__setattr__(self, "schemas", schemas)
        object.__setattr__(self, "layouts", _layouts(schemas, keys))


def _check_table(name: str) -> str:
    if not isinstance(name, str) or not _TABLE_NAME.fullmatch(name):
        raise DecoderConfigError(f"table names must be 'namespace.table' identifiers: {name!r}")
    return name.lower()


def _data_schema(table: str, schema: pa.Schema) -> pa.Schema:
    """The target schema without lakestream's own columns (callers may pass a table's schema)."""
    if not isinstance(schema, pa.Schema):
        raise DecoderConfigError(f"schema of {table} is not a pyarrow.Schema", table=table)
    keep = [f for f in schema if not f.name.startswith(_RESERVED_PREFIX)]
    return pa.schema(keep, metadata=schema.metadata)


def _layouts(
    schemas: Mapping[str, pa.Schema], keys: Mapping[str, tuple[str, ...]]
) -> dict[str, Layout]:
    layouts = {}
    for table, schema in schemas.items():
        try:
            layouts[table] = layout_from_arrow(schema)
        except (UnsupportedSchema, ValueError) as exc:
            raise DecoderConfigError(str(exc), table=table) from None
        missing = [c for c in keys.get(table, ()) if c not in schema.names]
        if missing:
            raise DecoderConfigError(
                f"primary key columns {missing} are not in the schema of {table}",
                table=table,
                column=missing[0],
            )
    return layouts


def _check_variable_scale(value: tuple[int, int]) -> None:
    precision, scale = value
    if not (1 <= precision <= 38 and 0 <= scale <= precision):
        raise DecoderConfigError(f"variable_scale_decimal must fit decimal128: {value}")
