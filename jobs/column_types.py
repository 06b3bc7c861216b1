"""Column types as a YAML file writes them (``int64``, ``decimal(10,2)``, ``timestamp[us, UTC]``).

Schemaless Debezium JSON (``value.converter.schemas.enable=false``) carries values, not types: a
decimal arrives as base64 bytes without its scale, a zoned timestamp as text, a time or a
timestamp as a plain number of some unit. A declared column type decides all of that, so the
grammar names exactly what the decoder can read (every type here has a codec in
:mod:`ingest.debezium.layout`):

================================  ==============================================================
``int8`` ... ``int64``            JSON integers
``float32``/``float``,            JSON numbers (and ``"NaN"``, ``"Infinity"``)
``float64``/``double``
``bool``/``boolean``              JSON booleans
``string``, ``uuid``, ``json``    JSON text (``json`` marks a Debezium Json column)
``binary``/``bytes``              base64 text
``date``                          days since the epoch
``decimal(p,s)``                  base64 unscaled bytes at scale ``s`` (Debezium's ``precise``
                                  mode), or a variable-scale ``{scale, value}`` rescaled exactly
``time[ms|us|ns]``                a number of that unit since midnight (stored as ``time64``:
                                  ``ms`` is stored in microseconds)
``timestamp[s|ms|us|ns]``         a number of that unit since the epoch, no zone
``timestamp[us, UTC]``            ISO-8601 text with an offset (ZonedTimestamp), stored in UTC
``list<type>``                    a JSON array of the item type
================================  ==============================================================
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pyarrow as pa

from ingest.debezium import LOGICAL_KEY
from ingest.debezium.layout import JSON, TIME_UNITS, UnsupportedSchema, codec_for_arrow

GRAMMAR = (
    "int8|int16|int32|int64, float32|float64, bool, string, uuid, json, binary, date, "
    "decimal(p,s), time[ms|us|ns], timestamp[s|ms|us|ns], timestamp[<unit>, UTC], list<type>"
)
_MS_TIME = next(name for name, unit in TIME_UNITS.items() if unit == "ms")

_SIMPLE: dict[str, Callable[[], pa.DataType]] = {
    "int8": pa.int8,
    "int16": pa.int16,
    "int32": pa.int32,
    "int64": pa.int64,
    "float32": pa.float32,
    "float": pa.float32,
    "float64": pa.float64,
    "double": pa.float64,
    "bool": pa.bool_,
    "boolean": pa.bool_,
    "string": pa.string,
    "uuid": pa.string,
    "binary": pa.binary,
    "bytes": pa.binary,
    "date": pa.date32,
}
_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
_TIME = re.compile(r"time\[(ms|us|ns)\]")
_TIMESTAMP = re.compile(r"timestamp\[(s|ms|us|ns)(?:,([^\]]+))?\]")
_LIST = re.compile(r"list<(.+)>")


class ColumnTypeError(ValueError):
    """A declared column type the grammar does not know; the message says what it accepts."""


def column_field(name: str, text: str) -> pa.Field:
    """The Arrow field of a declared column (nullable), checked to be decodable."""
    field = _field(name, text)
    try:
        codec_for_arrow(field)
    except (UnsupportedSchema, ValueError) as exc:  # the grammar should make this impossible
        raise ColumnTypeError(f"column {name!r}: {exc}") from None
    return field


def _field(name: str, text: str) -> pa.Field:
    compact = re.sub(r"\s+", "", text).lower()
    if compact == "json":
        return pa.field(name, pa.string(), metadata={LOGICAL_KEY: JSON.encode()})
    if compact in _SIMPLE:
        return pa.field(name, _SIMPLE[compact]())
    if match := _DECIMAL.fullmatch(compact):
        return pa.field(name, _decimal(name, int(match[1]), int(match[2])))
    if match := _TIME.fullmatch(compact):
        if match[1] == "ms":  # time64 has no ms unit: the logical name says the JSON is in ms
            return pa.field(name, pa.time64("us"), metadata={LOGICAL_KEY: _MS_TIME.encode()})
        return pa.field(name, pa.time64(match[1]))
    if match := _TIMESTAMP.fullmatch(compact):
        return pa.field(name, _timestamp(name, match[1], match[2]))
    if match := _LIST.fullmatch(compact):
        return pa.field(name, pa.list_(_field("item", match[1])))
    raise ColumnTypeError(f"column {name!r}: unknown type {text!r}; types are {GRAMMAR}")


def _decimal(name: str, precision: int, scale: int) -> pa.DataType:
    if not (1 <= precision <= 76 and 0 <= scale <= precision):
        raise ColumnTypeError(
            f"column {name!r}: decimal({precision},{scale}) needs 1 <= precision <= 76 and "
            "0 <= scale <= precision"
        )
    return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)


def _timestamp(name: str, unit: str, zone: str | None) -> pa.DataType:
    if zone is None:
        return pa.timestamp(unit)
    if zone != "utc":
        raise ColumnTypeError(
            f"column {name!r}: zoned timestamps are stored in UTC; write timestamp[{unit}, UTC]"
        )
    return pa.timestamp(unit, tz="UTC")
