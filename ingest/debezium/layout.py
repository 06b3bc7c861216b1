"""Table layouts: the Arrow schema of a table's rows and the codec of every column.

A layout comes from one of two places:

* the Kafka Connect schema embedded in a message (``{"schema": ..., "payload": ...}``), through
  :func:`layout_from_connect`; or
* an Arrow schema the caller knows for a table whose messages carry no schema, through
  :func:`layout_from_arrow`.

Connect types and Debezium's logical types map to Arrow as follows (the logical name is kept in
the field metadata under :data:`LOGICAL_KEY`, so a derived schema can later serve as the target
schema of schemaless messages and decode them the same way):

==============================================  ===============================================
connect ``int8/16/32/64``, ``float32/64``,      ``int8/16/32/64``, ``float32/64``, ``bool``,
``boolean``, ``string``, ``bytes``              ``string``, ``binary`` (bytes arrive as base64)
``array`` / ``map`` / ``struct``                ``list<T>`` / ``map<K, V>`` / ``struct``
``org.apache.kafka.connect.data.Decimal``       ``decimal128(p, s)``: ``s`` from ``scale``, ``p``
                                                from ``connect.decimal.precision`` (default 38);
                                                ``decimal256`` when ``p > 38``
``io.debezium.data.VariableScaleDecimal``       ``decimal128(38, 18)`` (configurable); a value
                                                that does not fit exactly is a dead letter
``io.debezium.time.Date``, connect ``Date``     ``date32``
``io.debezium.time.Time`` (ms), connect         ``time64[us]`` (PostgreSQL's ``24:00:00``
``Time`` (ms), ``io.debezium.time.MicroTime``   saturates to 23:59:59.999999)
``io.debezium.time.NanoTime``                   ``time64[ns]``
``io.debezium.time.Timestamp``, connect         ``timestamp[ms]`` (no zone)
``Timestamp``
``io.debezium.time.MicroTimestamp``             ``timestamp[us]`` (no zone)
``io.debezium.time.NanoTimestamp``              ``timestamp[ns]`` (no zone)
``io.debezium.time.ZonedTimestamp``             ``timestamp[us, tz=UTC]``
``io.debezium.time.ZonedTime``                  ``string``, the text as Debezium wrote it: a
                                                time with an offset has no lossless Arrow type
``io.debezium.data.Uuid``                       ``string`` (canonical text): every engine reads
                                                it, unlike Arrow's UUID extension type
``io.debezium.data.Json``                       ``string``, marked by the logical name
``io.debezium.data.Enum``                       ``string``
``io.debezium.data.EnumSet``                    ``list<string>``
``io.debezium.data.geometry.Geometry``,         ``binary`` holding the WKB (the SRID is dropped)
``Geography``, ``Point``
any other logical name                          the Arrow type of its connect type
==============================================  ===============================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from ingest.debezium.codecs import (
    BinaryCodec,
    BoolCodec,
    Codec,
    DateCodec,
    DecimalCodec,
    EnumSetCodec,
    FloatCodec,
    GeometryCodec,
    IntCodec,
    ListCodec,
    MapCodec,
    StringCodec,
    StructCodec,
    TimeCodec,
    TimestampCodec,
    ZonedTimestampCodec,
)
from ingest.debezium.errors import DebeziumError

#: Field-metadata key holding the Debezium / Kafka Connect logical type name of a column.
LOGICAL_KEY = b"debezium.logical"

DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
JSON = "io.debezium.data.Json"
ENUM_SET = "io.debezium.data.EnumSet"
ZONED_TIMESTAMP = "io.debezium.time.ZonedTimestamp"
GEOMETRY_TYPES = frozenset(
    f"io.debezium.data.geometry.{name}" for name in ("Geometry", "Geography", "Point")
)
#: JSON unit of each integer-encoded time of day / timestamp logical type.
TIME_UNITS = {
    "io.debezium.time.Time": "ms",
    "org.apache.kafka.connect.data.Time": "ms",
    "io.debezium.time.MicroTime": "us",
    "io.debezium.time.NanoTime": "ns",
}
TIMESTAMP_UNITS = {
    "io.debezium.time.Timestamp": "ms",
    "org.apache.kafka.connect.data.Timestamp": "ms",
    "io.debezium.time.MicroTimestamp": "us",
    "io.debezium.time.NanoTimestamp": "ns",
}
DATE_TYPES = frozenset({"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"})

_PRIMITIVES: dict[str, Callable[[], Codec]] = {
    "int8": lambda: IntCodec(pa.int8()),
    "int16": lambda: IntCodec(pa.int16()),
    "int32": lambda: IntCodec(pa.int32()),
    "int64": lambda: IntCodec(pa.int64()),
    # Kafka Connect's JsonConverter names FLOAT32/FLOAT64 "float"/"double" in embedded schemas
    "float": lambda: FloatCodec(pa.float32()),
    "double": lambda: FloatCodec(pa.float64()),
    "float32": lambda: FloatCodec(pa.float32()),
    "float64": lambda: FloatCodec(pa.float64()),
    "boolean": BoolCodec,
    "string": StringCodec,
    "bytes": BinaryCodec,
}


class UnsupportedSchema(DebeziumError, ValueError):
    """A connect or Arrow schema this decoder has no mapping for."""


@dataclass(frozen=True)
class Layout:
    """The data columns of one table as one message version describes them."""

    schema: pa.Schema
    codecs: tuple[Codec, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.schema.names)


# -- from an embedded Kafka Connect schema -------------------------------------------------------


def layout_from_connect(
    row_schema: Mapping[str, object], variable_scale: tuple[int, int]
) -> Layout:
    """The layout of the ``after``/``before`` struct schema of a Debezium envelope."""
    if row_schema.get("type") != "struct":
        raise UnsupportedSchema("the row schema of a Debezium envelope must be a struct")
    fields, codecs = [], []
    for child in _connect_fields(row_schema):
        field, codec = field_from_connect(child, _field_name(child), variable_scale)
        fields.append(field)
        codecs.append(codec)
    return Layout(pa.schema(fields), tuple(codecs))


def field_from_connect(
    schema: Mapping[str, object], name: str, variable_scale: tuple[int, int]
) -> tuple[pa.Field, Codec]:
    """One connect field schema as an Arrow field (nullable iff optional) and its codec."""
    logical = schema.get("name")
    codec = _connect_codec(schema, logical if isinstance(logical, str) else None, variable_scale)
    metadata = {LOGICAL_KEY: logical.encode()} if isinstance(logical, str) else None
    nullable = bool(schema.get("optional", False))
    return pa.field(name, codec.arrow_type, nullable=nullable, metadata=metadata), codec


def _connect_codec(
    schema: Mapping[str, object], logical: str | None, variable_scale: tuple[int, int]
) -> Codec:
    if logical is not None:
        codec = _logical_codec(logical, _parameters(schema), variable_scale)
        if codec is not None:
            return codec
    kind = schema.get("type")
    if kind == "array":
        item, codec = field_from_connect(_child(schema, "items"), "item", variable_scale)
        return ListCodec(codec, item)
    if kind == "map":
        _, key = field_from_connect(_child(schema, "keys"), "key", variable_scale)
        _, value = field_from_connect(_child(schema, "values"), "value", variable_scale)
        return MapCodec(key, value)
    if kind == "struct":
        children = [
            field_from_connect(child, _field_name(child), variable_scale)
            for child in _connect_fields(schema)
        ]
        return StructCodec(children)
    if isinstance(kind, str) and kind in _PRIMITIVES:
        return _PRIMITIVES[kind]()
    raise UnsupportedSchema(f"unsupported connect type {kind!r}")


def _logical_codec(
    logical: str, parameters: Mapping[str, str], variable_scale: tuple[int, int]
) -> Codec | None:
    if logical == DECIMAL:
        scale = _int_parameter(parameters, "scale", None)
        precision = _int_parameter(parameters, "connect.decimal.precision", 38)
        return DecimalCodec(max(precision, scale, 1), scale)
    if logical == VARIABLE_SCALE_DECIMAL:
        return DecimalCodec(*variable_scale)
    if logical in DATE_TYPES:
        return DateCodec()
    if logical in TIME_UNITS:
        unit = TIME_UNITS[logical]
        return TimeCodec(unit, "ns" if unit == "ns" else "us")
    if logical in TIMESTAMP_UNITS:
        unit = TIMESTAMP_UNITS[logical]
        return TimestampCodec(unit, unit)
    if logical == ZONED_TIMESTAMP:
        return ZonedTimestampCodec("us")
    if logical == ENUM_SET:
        return EnumSetCodec()
    if logical in GEOMETRY_TYPES:
        return GeometryCodec()
    return None


def _connect_fields(schema: Mapping[str, object]) -> list[Mapping[str, object]]:
    fields = schema.get("fields")
    if not isinstance(fields, list) or not all(isinstance(f, dict) for f in fields):
        raise UnsupportedSchema("a connect struct schema needs a list of fields")
    return fields


def _field_name(schema: Mapping[str, object]) -> str:
    name = schema.get("field")
    if not isinstance(name, str) or not name:
        raise UnsupportedSchema("a connect struct field needs a name")
    return name


def _child(schema: Mapping[str, object], key: str) -> Mapping[str, object]:
    child = schema.get(key)
    if not isinstance(child, dict):
        raise UnsupportedSchema(f"a connect {schema.get('type')} schema needs {key!r}")
    return child


def _parameters(schema: Mapping[str, object]) -> Mapping[str, str]:
    parameters = schema.get("parameters")
    return parameters if isinstance(parameters, dict) else {}


def _int_parameter(parameters: Mapping[str, str], key: str, default: int | None) -> int:
    raw = parameters.get(key)
    if raw is None:
        if default is None:
            raise UnsupportedSchema(f"schema parameter {key!r} is missing")
        return default
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise UnsupportedSchema(f"schema parameter {key!r} is not an integer: {raw!r}") from None


# -- from an Arrow schema given by the caller ----------------------------------------------------


def layout_from_arrow(schema: pa.Schema) -> Layout:
    """The layout for schemaless messages of a table whose Arrow schema the caller knows."""
    return Layout(schema, tuple(codec_for_arrow(field) for field in schema))


def codec_for_arrow(field: pa.Field) -> Codec:
    """The codec reading Debezium JSON into ``field``; the logical name in the metadata, if any,
    says how the JSON encodes the value (e.g. milliseconds for a ``time64[us]`` column)."""
    logical = (field.metadata or {}).get(LOGICAL_KEY, b"").decode() or None
    kind = field.type
    for matches, make in _ARROW_CODECS:
        if matches(kind):
            return make(field, logical)
    raise UnsupportedSchema(f"no Debezium decoding into Arrow type {kind} of column {field.name!r}")


def _time_codec(field: pa.Field, logical: str | None) -> Codec:
    unit = field.type.unit
    return TimeCodec(TIME_UNITS.get(logical or "", unit), unit)


def _timestamp_codec(field: pa.Field, logical: str | None) -> Codec:
    unit, tz = field.type.unit, field.type.tz
    if tz is not None and logical in (None, ZONED_TIMESTAMP):
        return ZonedTimestampCodec(unit)
    return TimestampCodec(TIMESTAMP_UNITS.get(logical or "", unit), unit, tz)


def _decimal_codec(field: pa.Field, logical: str | None) -> Codec:
    kind = field.type
    return DecimalCodec(kind.precision, kind.scale, wide=pa.types.is_decimal256(kind))


def _binary_codec(field: pa.Field, logical: str | None) -> Codec:
    return GeometryCodec() if logical in GEOMETRY_TYPES else BinaryCodec(field.type)


def _list_codec(field: pa.Field, logical: str | None) -> Codec:
    if logical == ENUM_SET:
        return EnumSetCodec()
    item = field.type.value_field
    return ListCodec(codec_for_arrow(item), item)


def _map_codec(field: pa.Field, logical: str | None) -> Codec:
    kind = field.type
    return MapCodec(codec_for_arrow(kind.key_field), codec_for_arrow(kind.item_field))


def _struct_codec(field: pa.Field, logical: str | None) -> Codec:
    return StructCodec([(child, codec_for_arrow(child)) for child in field.type])


_ArrowCodecMaker = Callable[[pa.Field, str | None], Codec]
_ARROW_CODECS: tuple[tuple[Callable[[pa.DataType], bool], _ArrowCodecMaker], ...] = (
    (pa.types.is_integer, lambda f, _: IntCodec(f.type)),
    (pa.types.is_floating, lambda f, _: FloatCodec(f.type)),
    (pa.types.is_boolean, lambda f, _: BoolCodec()),
    (
        lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
        lambda f, _: StringCodec(f.type),
    ),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), _binary_codec),
    (pa.types.is_decimal, _decimal_codec),
    (pa.types.is_date32, lambda f, _: DateCodec()),
    (pa.types.is_time64, _time_codec),
    (pa.types.is_timestamp, _timestamp_codec),
    (pa.types.is_list, _list_codec),
    (pa.types.is_map, _map_codec),
    (pa.types.is_struct, _struct_codec),
)
