"""Spark's pushed filters as catalog predicates, only where both mean exactly the same.

A converted filter is applied twice by the reader: on the driver it prunes partitions, buckets
and files (by partition values, key hashes and column statistics), and on the executors it
filters rows (after the merge, for non-key columns of CDC tables). Spark then does not evaluate
it again, so a conversion must be exact; whatever is not is left to Spark:

* floating-point columns: Spark orders NaN above every number and finds ``NaN = NaN``; Arrow
  (and the file statistics, which leave NaN out) find no NaN comparison true;
* a value that does not fit the column type exactly (``1.5`` against an integer column, a
  microsecond against a millisecond timestamp, an offset-less time against an instant);
* nested column paths, string patterns (``LIKE``), ``NOT IN`` and any other negation but
  ``<>`` and ``NOT (IS [NOT] NULL)``;
* columns of nested, dictionary-encoded or time types.

SQL's null semantics hold on both sides: a null never satisfies a comparison, ``IN`` ignores
null values in its list, and ``a <=> v`` with ``v`` not null filters like ``a = v``.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import pyarrow as pa
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
)

from catalog.files import Op, Predicate

#: Whether a Python value is of the kind a column type holds.
ValueCheck: TypeAlias = Callable[[object], bool]


@dataclass(frozen=True)
class ColumnRef:
    """A Spark output column: the table column it reads and that column's Arrow type."""

    name: str
    arrow_type: pa.DataType


_COMPARISONS: dict[type[Filter], Op] = {
    EqualTo: "=",
    EqualNullSafe: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}
_NEGATED_NULL_TESTS: dict[type[Filter], Op] = {IsNull: "is_not_null", IsNotNull: "is_null"}


def split_filters(
    filters: Sequence[Filter], columns: Mapping[str, ColumnRef]
) -> tuple[list[Predicate], list[Filter]]:
    """(predicates the reader applies exactly, filters Spark must still evaluate)."""
    pushed: list[Predicate] = []
    left: list[Filter] = []
    for spark_filter in filters:
        predicate = to_predicate(spark_filter, columns)
        if predicate is None:
            left.append(spark_filter)
        else:
            pushed.append(predicate)
    return pushed, left


def to_predicate(spark_filter: Filter, columns: Mapping[str, ColumnRef]) -> Predicate | None:
    """The predicate meaning exactly ``spark_filter``, or None to leave it to Spark."""
    if isinstance(spark_filter, Not):
        return _negation(spark_filter.child, columns)
    column = _column(spark_filter, columns)
    if column is None:
        return None
    if isinstance(spark_filter, IsNull | IsNotNull):
        return Predicate(
            column.name, "is_null" if isinstance(spark_filter, IsNull) else "is_not_null"
        )
    if isinstance(spark_filter, EqualNullSafe) and spark_filter.value is None:
        return Predicate(column.name, "is_null")
    if isinstance(spark_filter, In):
        return _membership(column, spark_filter.value)
    op = _COMPARISONS.get(type(spark_filter))
    if op is None:
        return None
    return _comparison(column, op, getattr(spark_filter, "value", None))


def _negation(child: Filter, columns: Mapping[str, ColumnRef]) -> Predicate | None:
    column = _column(child, columns)
    if column is None:
        return None
    null_test = _NEGATED_NULL_TESTS.get(type(child))
    if null_test is not None:
        return Predicate(column.name, null_test)
    if type(child) is EqualTo:  # NOT (a = v) is a <> v; NOT (a <=> v) also keeps nulls
        return _comparison(column, "!=", child.value)
    return None


def _column(spark_filter: Filter, columns: Mapping[str, ColumnRef]) -> ColumnRef | None:
    path = getattr(spark_filter, "attribute", None)
    if not isinstance(path, tuple) or len(path) != 1:
        return None  # nested fields are not pruned by the catalog
    return columns.get(path[0])


def _comparison(column: ColumnRef, op: Op, value: object) -> Predicate | None:
    if not _comparable(column.arrow_type):
        return None
    typed = exact_value(value, column.arrow_type)
    return None if typed is None else Predicate(column.name, op, typed)


def _membership(column: ColumnRef, values: object) -> Predicate | None:
    if not _comparable(column.arrow_type) or not isinstance(values, list | tuple):
        return None
    typed = [exact_value(v, column.arrow_type) for v in values if v is not None]
    if any(v is None for v in typed):
        return None
    return Predicate(column.name, "in", tuple(typed))


def _comparable(arrow_type: pa.DataType) -> bool:
    return _value_check(arrow_type) is not None


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _is_bytes(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t))


def _is_integral(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_day(value: object) -> bool:
    return isinstance(value, dt.date) and not isinstance(value, dt.datetime)


def _is_instant(value: object) -> bool:
    return isinstance(value, dt.datetime) and value.tzinfo is not None


def _is_wall_clock(value: object) -> bool:
    return isinstance(value, dt.datetime) and value.tzinfo is None


def _is_decimal(value: object) -> bool:
    return _is_integral(value) or isinstance(value, decimal.Decimal)


TypeTest: TypeAlias = Callable[[pa.DataType], bool]
#: Column types whose comparisons mean the same in Spark, Arrow and the file statistics, with
#: the Python values a Spark filter may carry for them (timestamps: see :func:`_value_check`).
_VALUE_KINDS: tuple[tuple[TypeTest, ValueCheck], ...] = (
    (pa.types.is_integer, _is_integral),
    (pa.types.is_decimal, _is_decimal),
    (pa.types.is_boolean, lambda v: isinstance(v, bool)),
    (_is_text, lambda v: isinstance(v, str)),
    (_is_bytes, lambda v: isinstance(v, bytes | bytearray)),
    (pa.types.is_date, _is_day),
)


def _value_check(arrow_type: pa.DataType) -> ValueCheck | None:
    if pa.types.is_timestamp(arrow_type):
        return _is_instant if arrow_type.tz is not None else _is_wall_clock
    return next((check for matches, check in _VALUE_KINDS if matches(arrow_type)), None)


def exact_value(value: object, arrow_type: pa.DataType) -> object | None:
    """``value`` as a value of ``arrow_type``, or None unless the conversion is lossless.

    Timestamps come back in the column's time zone, because Arrow refuses to compare instants
    of different zones.
    """
    check = _value_check(arrow_type)
    if check is None or not check(value):
        return None
    if isinstance(value, bytearray):
        value = bytes(value)
    try:
        scalar = pa.scalar(value, arrow_type)
        if pa.types.is_timestamp(arrow_type):  # read back at microseconds: no silent rounding
            scalar = scalar.cast(pa.timestamp("us", arrow_type.tz))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError):
        return None
    typed = scalar.as_py()
    return typed if typed == value else None
