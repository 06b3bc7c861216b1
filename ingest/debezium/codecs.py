"""Column codecs: the JSON values of one column, collected over a batch, into one Arrow array.

The decoder does not convert values row by row. It collects each column's raw JSON values into a
Python list and hands the list to the column's codec once per batch, because one ``pa.array`` call
per column is an order of magnitude faster than per-row conversion. Every codec therefore has two
paths that must agree:

* :meth:`Codec.build` - the fast path for a whole column; it raises if *any* value is bad.
* :meth:`Codec.convert` - a strict per-value check and conversion, used for nested values and,
  when ``build`` failed, to find which rows were bad so that only they become dead letters.

Strictness matters because ``pa.array`` is lenient where we cannot be: it truncates ``1.5`` into
an int64 column and reads ``true`` as ``1.0`` without a word. The fast paths therefore check the
exact JSON types of a column's values first (one C-level pass) and leave range checks to Arrow.
"""

from __future__ import annotations

import binascii
import datetime as dt
import decimal
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TypeGuard

import pyarrow as pa
import pyarrow.compute as pc

from ingest.debezium.errors import ValueMismatch

#: Exceptions that mean "some value in this column did not fit", from Arrow or from our checks.
BUILD_ERRORS = (pa.ArrowException, ValueError, TypeError, OverflowError, binascii.Error)

_UNIT_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}
_NON_FINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_EXACT = decimal.Context(prec=100, traps=[decimal.Inexact, decimal.Rounded])


def _mismatch(value: object, expected: str) -> ValueMismatch:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return ValueMismatch(f"expected {expected}, got {type(value).__name__} {shown}")


def _is_int(value: object) -> TypeGuard[int]:
    """True for JSON integers only: ``bool`` is an ``int`` subclass but never a number here."""
    return type(value) is int


def _pow10(digits: int) -> int:
    result: int = 10**digits
    return result


def _only(values: list[object], *accepted: type) -> list[object]:
    """``values`` if every non-null value has one of the ``accepted`` JSON types, else raise.

    Checked by exact type, once per column: Arrow itself would take ``True`` as a number and
    truncate ``1.5`` into an integer column.
    """
    found = set(map(type, values))
    found.discard(type(None))
    if not found.issubset(accepted):
        names = ", ".join(sorted(t.__name__ for t in found - set(accepted)))
        raise ValueMismatch(f"column holds {names} values")
    return values


class Codec(ABC):
    """Converts one column's JSON values into Arrow values of :attr:`arrow_type`."""

    arrow_type: pa.DataType

    @abstractmethod
    def convert(self, value: object) -> object:
        """Check one non-null JSON value and return what ``pa.array`` accepts for the type."""

    def build(self, values: list[object]) -> pa.Array:
        """Build the column; raises one of :data:`BUILD_ERRORS` if any value is bad."""
        convert = self.convert
        return pa.array([None if v is None else convert(v) for v in values], type=self.arrow_type)


class IntCodec(Codec):
    def __init__(self, arrow_type: pa.DataType) -> None:
        self.arrow_type = arrow_type
        bits = arrow_type.bit_width
        self._low, self._high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def convert(self, value: object) -> object:
        if not _is_int(value):
            raise _mismatch(value, f"an integer for {self.arrow_type}")
        if not self._low <= value <= self._high:
            raise ValueMismatch(f"{value} is out of range for {self.arrow_type}")
        return value

    def build(self, values: list[object]) -> pa.Array:
        return pa.array(_only(values, int), type=self.arrow_type)


class FloatCodec(Codec):
    """JSON numbers; also the strings Jackson writes for NaN and the infinities."""

    def __init__(self, arrow_type: pa.DataType) -> None:
        self.arrow_type = arrow_type

    def convert(self, value: object) -> object:
        if type(value) is float or _is_int(value):
            return float(value)
        if isinstance(value, str) and value in _NON_FINITE:
            return _NON_FINITE[value]
        raise _mismatch(value, "a number")

    def build(self, values: list[object]) -> pa.Array:
        try:
            return pa.array(_only(values, float, int), type=self.arrow_type)
        except BUILD_ERRORS:
            return super().build(values)


class BoolCodec(Codec):
    arrow_type = pa.bool_()

    def convert(self, value: object) -> object:
        if type(value) is not bool:
            raise _mismatch(value, "a boolean")
        return value

    def build(self, values: list[object]) -> pa.Array:
        return pa.array(_only(values, bool), type=pa.bool_())


class StringCodec(Codec):
    """Text, and the logical types kept as text (Uuid, Json, Enum, ZonedTime, Xml, ...)."""

    def __init__(self, arrow_type: pa.DataType | None = None) -> None:
        self.arrow_type = arrow_type if arrow_type is not None else pa.string()

    def convert(self, value: object) -> object:
        if not isinstance(value, str):
            raise _mismatch(value, "a string")
        return value

    def build(self, values: list[object]) -> pa.Array:
        return pa.array(values, type=self.arrow_type)


def _base64(value: object) -> bytes:
    if not isinstance(value, str):
        raise _mismatch(value, "a base64 string")
    try:
        return binascii.a2b_base64(value, strict_mode=True)
    except binascii.Error as exc:
        raise ValueMismatch(f"invalid base64: {exc}") from None


class BinaryCodec(Codec):
    """Connect ``bytes``: the JSON converter writes them as base64 text."""

    def __init__(self, arrow_type: pa.DataType | None = None) -> None:
        self.arrow_type = arrow_type if arrow_type is not None else pa.binary()

    def convert(self, value: object) -> object:
        return _base64(value)


class GeometryCodec(Codec):
    """Debezium's Geometry/Geography/Point structs ``{wkb, srid}``: kept as the WKB bytes."""

    arrow_type = pa.binary()

    def convert(self, value: object) -> object:
        if not isinstance(value, dict) or "wkb" not in value:
            raise _mismatch(value, "a geometry struct with 'wkb'")
        return _base64(value["wkb"])


class DecimalCodec(Codec):
    """Connect ``Decimal`` (base64 unscaled integer at a fixed scale) and
    ``VariableScaleDecimal`` (``{"scale": s, "value": base64}``), both into a fixed scale.

    A variable-scale value is rescaled exactly: it becomes a mismatch (a dead letter), never a
    rounded number, when it has more fractional digits than the column's scale or more digits
    than its precision.
    """

    def __init__(self, precision: int, scale: int, *, wide: bool | None = None) -> None:
        if not 0 <= scale <= precision:
            raise ValueError(f"unsupported decimal precision {precision} and scale {scale}")
        wide = precision > 38 if wide is None else wide
        self.precision, self.scale = precision, scale
        self.arrow_type = (pa.decimal256 if wide else pa.decimal128)(precision, scale)
        self._width = 32 if wide else 16
        self._limit = _pow10(precision)

    def unscaled(self, value: object) -> int:
        """The value as an integer at this codec's scale, checked against the precision."""
        if isinstance(value, str):
            number = int.from_bytes(_base64(value), "big", signed=True)
        elif isinstance(value, dict):
            number = self._rescale(value)
        elif _is_int(value):
            number = value * _pow10(self.scale)
        else:
            raise _mismatch(value, "a base64 decimal")
        if not -self._limit < number < self._limit:
            raise ValueMismatch(f"decimal does not fit precision {self.precision}")
        return number

    def _rescale(self, value: dict[str, object]) -> int:
        scale = value.get("scale")
        if not _is_int(scale):
            raise _mismatch(scale, "an integer variable-scale decimal scale")
        number = int.from_bytes(_base64(value.get("value")), "big", signed=True)
        if scale <= self.scale:
            return number * _pow10(self.scale - scale)
        quotient, remainder = divmod(number, _pow10(scale - self.scale))
        if remainder:
            raise ValueMismatch(
                f"decimal with scale {scale} cannot be represented exactly at scale {self.scale}"
            )
        return quotient

    def convert(self, value: object) -> object:
        return decimal.Decimal(self.unscaled(value)).scaleb(-self.scale, _EXACT)

    def build(self, values: list[object]) -> pa.Array:
        # The hot loop of decimal-heavy tables: base64 text at the declared scale is decoded
        # inline; anything else takes the general path of :meth:`unscaled`.
        width, limit, zero = self._width, self._limit, bytes(self._width)
        a2b, from_bytes = binascii.a2b_base64, int.from_bytes
        chunks: list[bytes] = []
        append = chunks.append
        for value in values:
            if value is None:
                append(zero)
                continue
            if type(value) is str:
                number = from_bytes(a2b(value, strict_mode=True), "big", signed=True)
                if not -limit < number < limit:
                    raise ValueMismatch(f"decimal does not fit precision {self.precision}")
            else:
                number = self.unscaled(value)
            append(number.to_bytes(width, "little", signed=True))
        valid = pa.array([v is not None for v in values], type=pa.bool_())
        bitmap = None if valid.false_count == 0 else valid.buffers()[1]
        data = pa.py_buffer(b"".join(chunks))
        return pa.Array.from_buffers(self.arrow_type, len(values), [bitmap, data])


class DateCodec(Codec):
    """Days since the epoch (``io.debezium.time.Date``, connect ``Date``)."""

    arrow_type = pa.date32()

    def convert(self, value: object) -> object:
        if not _is_int(value):
            raise _mismatch(value, "days since the epoch")
        if not -(1 << 31) <= value < 1 << 31:
            raise ValueMismatch(f"{value} days is out of range for date32")
        return value

    def build(self, values: list[object]) -> pa.Array:
        return pa.array(_only(values, int), type=pa.int32()).cast(pa.date32())


def _scale_factor(json_unit: str, arrow_unit: str) -> int:
    digits = _UNIT_DIGITS[arrow_unit] - _UNIT_DIGITS[json_unit]
    if digits < 0:
        raise ValueError(f"cannot store {json_unit} values as {arrow_unit} without losing digits")
    return _pow10(digits)


class TimeCodec(Codec):
    """Time of day as an integer count of ``json_unit`` since midnight, stored as time64.

    PostgreSQL accepts ``24:00:00``, which Arrow's time types cannot hold (a day is
    ``[0, 24h)``): it saturates to the last instant of the day, 23:59:59.999999(999).
    """

    def __init__(self, json_unit: str, arrow_unit: str) -> None:
        self.arrow_type = pa.time64(arrow_unit)
        self._factor = _scale_factor(json_unit, arrow_unit)
        self._day = 86_400 * _pow10(_UNIT_DIGITS[arrow_unit])

    def convert(self, value: object) -> object:
        if not _is_int(value):
            raise _mismatch(value, "an integer time of day")
        scaled = value * self._factor
        if not 0 <= scaled <= self._day:
            raise ValueMismatch(f"time of day {value} is out of range")
        return min(scaled, self._day - 1)

    def build(self, values: list[object]) -> pa.Array:
        array = pa.array(_only(values, int), type=pa.int64())
        if self._factor != 1:
            array = pc.multiply_checked(array, self._factor)
        bounds = pc.min_max(array)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is not None and (low < 0 or high > self._day):
            raise ValueMismatch("time of day out of range")
        if high == self._day:
            array = pc.min_element_wise(array, pa.scalar(self._day - 1, pa.int64()))
        return array.cast(self.arrow_type)


class TimestampCodec(Codec):
    """Timestamps without zone as an integer count of ``json_unit`` since the epoch."""

    def __init__(self, json_unit: str, arrow_unit: str, tz: str | None = None) -> None:
        self.arrow_type = pa.timestamp(arrow_unit, tz=tz)
        self._factor = _scale_factor(json_unit, arrow_unit)

    def convert(self, value: object) -> object:
        if not _is_int(value):
            raise _mismatch(value, "an integer timestamp")
        scaled = value * self._factor
        if not -(1 << 63) <= scaled < 1 << 63:
            raise ValueMismatch(f"timestamp {value} is out of range")
        return scaled

    def build(self, values: list[object]) -> pa.Array:
        array = pa.array(_only(values, int), type=pa.int64())
        if self._factor != 1:
            array = pc.multiply_checked(array, self._factor)
        return array.cast(self.arrow_type)


_FRACTION = re.compile(r"(\.\d{6})\d+")
#: PostgreSQL's infinite timestamptz, which Debezium writes as text, saturate to the type's range.
_ZONED_INFINITY = {
    "infinity": dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
    "-infinity": dt.datetime(1, 1, 1, tzinfo=dt.UTC),
}


class ZonedTimestampCodec(Codec):
    """``io.debezium.time.ZonedTimestamp``: ISO-8601 text with an offset, stored in UTC.

    Digits below the column's unit (nanoseconds from Oracle or SQL Server, stored as
    microseconds) are truncated; ``infinity``/``-infinity`` become 9999-12-31T23:59:59.999999Z
    and 0001-01-01T00:00:00Z, which keep their order against every real timestamp.
    """

    def __init__(self, unit: str = "us") -> None:
        self.arrow_type = pa.timestamp(unit, tz="UTC")

    def convert(self, value: object) -> object:
        if not isinstance(value, str):
            raise _mismatch(value, "an ISO-8601 timestamp with offset")
        if value in _ZONED_INFINITY:
            return _ZONED_INFINITY[value]
        try:
            parsed = dt.datetime.fromisoformat(_FRACTION.sub(r"\1", value))
        except ValueError:
            raise _mismatch(value, "an ISO-8601 timestamp with offset") from None
        if parsed.tzinfo is None:
            raise _mismatch(value, "an ISO-8601 timestamp with offset")
        return parsed

    def build(self, values: list[object]) -> pa.Array:
        try:
            return pa.array(values, type=pa.string()).cast(self.arrow_type)
        except BUILD_ERRORS:
            return super().build(values)


class EnumSetCodec(Codec):
    """``io.debezium.data.EnumSet`` (MySQL SET): comma-separated text into a list of strings."""

    arrow_type = pa.list_(pa.string())

    def convert(self, value: object) -> object:
        if not isinstance(value, str):
            raise _mismatch(value, "a comma-separated set")
        return value.split(",") if value else []


class ListCodec(Codec):
    def __init__(self, item: Codec, item_field: pa.Field) -> None:
        self.item = item
        self.arrow_type = pa.list_(item_field)

    def convert(self, value: object) -> object:
        if not isinstance(value, list):
            raise _mismatch(value, "an array")
        convert = self.item.convert
        return [None if v is None else convert(v) for v in value]


class StructCodec(Codec):
    def __init__(self, children: Sequence[tuple[pa.Field, Codec]]) -> None:
        self.children = tuple(children)
        self.arrow_type = pa.struct([child for child, _ in self.children])

    def convert(self, value: object) -> object:
        if not isinstance(value, dict):
            raise _mismatch(value, "an object")
        out: dict[str, object] = {}
        for child, codec in self.children:
            item = value.get(child.name)
            out[child.name] = None if item is None else codec.convert(item)
        return out


class MapCodec(Codec):
    """Connect maps: a JSON object when keys are strings, else a list of ``[key, value]`` pairs."""

    def __init__(self, key: Codec, value: Codec) -> None:
        self.key, self.value = key, value
        self.arrow_type = pa.map_(key.arrow_type, value.arrow_type)

    def convert(self, value: object) -> object:
        if isinstance(value, dict):
            pairs: list[object] = list(value.items())
        elif isinstance(value, list):
            pairs = value
        else:
            raise _mismatch(value, "a map")
        return [self._pair(pair) for pair in pairs]

    def _pair(self, pair: object) -> tuple[object, object]:
        if not isinstance(pair, list | tuple) or len(pair) != 2 or pair[0] is None:
            raise _mismatch(pair, "a [key, value] pair")
        item = pair[1]
        return self.key.convert(pair[0]), None if item is None else self.value.convert(item)
