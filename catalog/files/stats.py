"""Column statistics of data files, and their JSON-safe encoding in the catalog.

Statistics (min, max, null count per column) are stored in the catalog as JSON, so every value
is a :data:`catalog.model.StatValue` (int, float, str, bool or None). The encoding is exact and
round-trips through :func:`decode_stat` to a typed ``pa.Scalar``:

====================================  ===================================================
Arrow type                            encoded value
====================================  ===================================================
bool                                  bool
int8..int64, uint8..uint64            int (JSON numbers of any size)
float16/32/64                         float; NaN and +-inf are never stored (``None``)
decimal (any width)                   str, plain notation with exactly ``scale`` digits:
                                      ``"-12.30"``
string, large_string, string_view     str; longer than :data:`STRING_STAT_CHARS` code
                                      points: min truncated, max truncated and its last
                                      code point incremented (still an upper bound)
date32, date64                        str ``"YYYY-MM-DD"``
time32, time64                        str ``"HH:MM:SS[.f]"``, fraction with exactly 3/6/9
                                      digits for ms/us/ns, none for s
timestamp                             str ``"YYYY-MM-DDTHH:MM:SS[.f]"`` with the unit's
                                      fraction digits as for time; with a time zone, the
                                      UTC instant followed by ``"Z"``
binary, fixed_size_binary, nested,    no min/max (``None``); the null count is kept
null, duration, other
====================================  ===================================================

``None`` as min or max means "no bound known" (all values null, only NaN, a value outside
Python's date range, or a type without stats): pruning then treats the file as a possible match.

Stats are computed with ``pyarrow.compute.min_max`` over the data being written rather than read
back from the Parquet footer: the writer holds the data anyway, and the footer holds one entry
per row group (to be combined) whose string bounds other writers may truncate differently.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re

import pyarrow as pa
import pyarrow.compute as pc

from catalog.model import ColumnStats, StatValue

#: Longest string bound kept in the catalog, in code points.
STRING_STAT_CHARS = 64

_EPOCH = dt.datetime(1970, 1, 1)
_UNIT_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_FRACTION_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}
_TIME_RE = re.compile(r"^(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?$")
_TIMESTAMP_RE = re.compile(r"^(.{4,}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z?)$")
_MAX_CODE_POINT = 0x10FFFF
_SURROGATES = range(0xD800, 0xE000)


def has_min_max(arrow_type: pa.DataType) -> bool:
    """Whether min/max statistics are kept for columns of this type."""
    t = arrow_type
    return (
        pa.types.is_boolean(t)
        or pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or _is_string(t)
        or pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_timestamp(t)
    )


def _is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


# ---------------------------------------------------------------------------------- encode


def _format_fraction(fraction: int, unit: str) -> str:
    digits = _FRACTION_DIGITS[unit]
    return f".{fraction:0{digits}d}" if digits else ""


def _encode_timestamp(value: int, arrow_type: pa.TimestampType) -> str | None:
    seconds, fraction = divmod(value, _UNIT_PER_SECOND[arrow_type.unit])
    try:
        moment = _EPOCH + dt.timedelta(seconds=seconds)
    except OverflowError:
        return None
    zone = "Z" if arrow_type.tz is not None else ""
    return moment.isoformat(timespec="seconds") + _format_fraction(fraction, arrow_type.unit) + zone


def _encode_time(value: int, unit: str) -> str:
    seconds, fraction = divmod(value, _UNIT_PER_SECOND[unit])
    hours, rest = divmod(seconds, 3600)
    return f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}" + _format_fraction(fraction, unit)


def _temporal_int(scalar: pa.Scalar) -> int:
    width = pa.int64() if scalar.type.bit_width == 64 else pa.int32()
    return int(scalar.cast(width).as_py())


def _increment_last(prefix: str) -> str | None:
    """The shortest string greater than every string starting with ``prefix``, if any."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1]) + 1
        if code in _SURROGATES:
            code = _SURROGATES.stop
        if code <= _MAX_CODE_POINT:
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


def _encode_string(value: str, bound: str) -> str | None:
    if len(value) <= STRING_STAT_CHARS:
        return value
    prefix = value[:STRING_STAT_CHARS]
    return prefix if bound == "min" else _increment_last(prefix)


def encode_stat(scalar: pa.Scalar, bound: str = "min") -> StatValue:
    """Encode a min (``bound="min"``) or max (``bound="max"``) value as a JSON-safe StatValue."""
    if not scalar.is_valid:
        return None
    t = scalar.type
    if pa.types.is_boolean(t) or pa.types.is_integer(t):
        return scalar.as_py()  # type: ignore[no-any-return]
    if pa.types.is_floating(t):
        number = float(scalar.as_py())
        return number if math.isfinite(number) else None
    if pa.types.is_decimal(t):
        return format(scalar.as_py(), "f")
    if _is_string(t):
        return _encode_string(str(scalar.as_py()), bound)
    if pa.types.is_date(t):
        return scalar.cast(pa.date32()).as_py().isoformat()  # type: ignore[no-any-return]
    if pa.types.is_time(t):
        return _encode_time(_temporal_int(scalar), t.unit)
    if pa.types.is_timestamp(t):
        return _encode_timestamp(_temporal_int(scalar), t)
    return None


# ---------------------------------------------------------------------------------- decode


def _fraction_units(fraction: str | None, unit: str) -> int:
    if not fraction:
        return 0
    digits = _FRACTION_DIGITS[unit]
    if len(fraction) > digits and int(fraction[digits:]) != 0:
        raise ValueError(f"fraction {fraction!r} is finer than unit {unit!r}")
    return int(fraction[:digits].ljust(digits, "0")) if digits else 0


def _decode_time(value: str, arrow_type: pa.DataType) -> pa.Scalar:
    match = _TIME_RE.match(value)
    if match is None:
        raise ValueError(f"not a time statistic: {value!r}")
    h, m, s, fraction = match.groups()
    unit = arrow_type.unit
    units = (int(h) * 3600 + int(m) * 60 + int(s)) * _UNIT_PER_SECOND[unit]
    units += _fraction_units(fraction, unit)
    storage = pa.int64() if arrow_type.bit_width == 64 else pa.int32()
    return pa.scalar(units, storage).cast(arrow_type)


def _decode_timestamp(value: str, arrow_type: pa.TimestampType) -> pa.Scalar:
    match = _TIMESTAMP_RE.match(value)
    if match is None:
        raise ValueError(f"not a timestamp statistic: {value!r}")
    day, clock, fraction, _zone = match.groups()
    moment = dt.datetime.fromisoformat(f"{day}T{clock}")
    seconds = (moment - _EPOCH) // dt.timedelta(seconds=1)
    unit = arrow_type.unit
    units = seconds * _UNIT_PER_SECOND[unit] + _fraction_units(fraction, unit)
    return pa.scalar(units, pa.int64()).cast(arrow_type)


def decode_stat(value: StatValue, arrow_type: pa.DataType) -> pa.Scalar:
    """The typed value of an encoded statistic, for a column of type ``arrow_type``.

    ``arrow_type`` may be the column's type in a later schema than the file's, as long as the
    change was an allowed widening (int32 -> int64, decimal precision, ...). ``None`` decodes to
    a null scalar of that type.
    """
    t = arrow_type
    if value is None:
        return pa.scalar(None, t)
    if pa.types.is_decimal(t):
        return pa.scalar(decimal.Decimal(str(value)), t)
    if pa.types.is_date(t):
        return pa.scalar(dt.date.fromisoformat(str(value)), pa.date32()).cast(t)
    if pa.types.is_time(t):
        return _decode_time(str(value), t)
    if pa.types.is_timestamp(t):
        return _decode_timestamp(str(value), t)
    if pa.types.is_floating(t):
        return pa.scalar(float(value), t)
    return pa.scalar(value, t)


# ---------------------------------------------------------------------------------- compute


def _column_min_max(column: pa.ChunkedArray | pa.Array) -> tuple[StatValue, StatValue]:
    if pa.types.is_dictionary(column.type):
        column = pc.cast(column, column.type.value_type)
    if pa.types.is_string_view(column.type):
        column = pc.cast(column, pa.large_string())
    if pa.types.is_float16(column.type):
        column = pc.cast(column, pa.float32())
    bounds = pc.min_max(column)
    return encode_stat(bounds["min"], "min"), encode_stat(bounds["max"], "max")


def _value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def column_stats(data: pa.Table | pa.RecordBatch) -> dict[str, ColumnStats]:
    """Min, max and null count of every top-level column (see the module docstring)."""
    stats: dict[str, ColumnStats] = {}
    for field, column in zip(data.schema, data.columns, strict=True):
        low: StatValue = None
        high: StatValue = None
        if has_min_max(_value_type(field.type)) and column.null_count < len(column):
            low, high = _column_min_max(column)
        stats[field.name] = ColumnStats(min=low, max=high, null_count=column.null_count)
    return stats
