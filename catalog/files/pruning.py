"""File pruning by column statistics, with a tiny filter language of simple predicates.

Why a language of our own: a ``pyarrow.compute.Expression`` cannot be taken apart through a
public API in pyarrow 26 (its ``str()`` and its pickle payload are internal formats), so reliable
extraction of ``column op value`` conjuncts from one is not feasible. Callers who want pruning
(and key-filter pushdown in merge reads) pass a conjunction of :class:`Predicate`; it converts to
an Expression for row filtering with :func:`to_expression`. A plain Expression is still accepted
by the readers: it filters rows but prunes nothing.

Semantics are SQL's: a null never satisfies a comparison. Pruning is conservative: a file is
skipped only when its statistics prove that no row can match; a missing or unknown bound never
skips anything.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import pyarrow as pa
import pyarrow.compute as pc

from catalog.errors import SchemaError
from catalog.files.stats import decode_stat, has_min_max
from catalog.model import ColumnStats, DataFile, StatValue

Op = Literal["=", "!=", "<", "<=", ">", ">=", "in", "is_null", "is_not_null"]
_OPS: frozenset[str] = frozenset(get_args(Op))
_COMPARE = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


@dataclass(frozen=True)
class Predicate:
    """``column op value``; ``value`` is a tuple for ``in`` and unused for the null tests."""

    column: str
    op: Op
    value: object = None

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"unknown predicate operator {self.op!r}")
        if self.op == "in" and not isinstance(self.value, tuple | list | frozenset | set):
            raise ValueError("the 'in' operator needs a collection of values")

    def to_expression(self, schema: pa.Schema | None = None) -> pc.Expression:
        """The predicate as an Arrow expression. With ``schema``, values are converted to the
        column's type first (a naive datetime against a zoned timestamp column is taken in that
        zone, an int against a float column becomes a float), as the statistics pruning does;
        an untyped value would fail to compare ("Cannot compare timestamp with timezone ...")."""
        field = pc.field(self.column)
        if self.op == "is_null":
            return field.is_null()
        if self.op == "is_not_null":
            return field.is_valid()
        arrow_type = _column_type(schema, self.column)
        if self.op == "in":
            return field.isin(_typed_values(_values(self), arrow_type, self.column))
        return _COMPARE[self.op](field, _typed(self.value, arrow_type, self.column))


def _column_type(schema: pa.Schema | None, column: str) -> pa.DataType | None:
    if schema is None or schema.get_field_index(column) < 0:
        return None
    return schema.field(column).type


_ARROW_CONVERSION = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError)


def _converted(value: object, arrow_type: pa.DataType) -> pa.Scalar | None:
    """``value`` as a scalar of the column type, None if it does not convert. Text is parsed
    the way Arrow casts it (``"2026-01-01"`` against a date column, ``"7"`` against an integer
    one), as SQL engines and pyiceberg take literals. A fraction is no integer: Arrow would
    truncate 1.5 to 1 (so ``id < 1.5`` would prune the files holding 1)."""
    if isinstance(value, float) and pa.types.is_integer(arrow_type) and not value.is_integer():
        return None
    try:
        return pa.scalar(value, arrow_type)
    except _ARROW_CONVERSION:
        pass
    if not isinstance(value, str):
        return None
    try:
        return pa.scalar(value).cast(arrow_type)
    except _ARROW_CONVERSION:
        return None


def _typed(value: object, arrow_type: pa.DataType | None, column: str = "") -> pa.Scalar:
    """``value`` as a scalar of the column type when it converts; as it is otherwise (Arrow's
    own comparison then decides: an int against a float column, 1.5 against an integer one).

    Raises:
        SchemaError: text that is no value of a non-text column (a misspelt date): it would
            otherwise fail deep in the scan with Arrow's words.
    """
    if isinstance(value, pa.Scalar) or arrow_type is None:
        return value if isinstance(value, pa.Scalar) else pa.scalar(value)
    converted = _converted(value, arrow_type)
    if converted is not None:
        return converted
    if isinstance(value, str) and not _is_text(arrow_type):
        raise SchemaError(
            f"filter on {column!r}: {value!r} is not a value of its type {arrow_type}",
            column=column,
        )
    return pa.scalar(value)


def _is_text(arrow_type: pa.DataType) -> bool:
    return bool(pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type))


def _typed_values(
    values: list[object], arrow_type: pa.DataType | None, column: str = ""
) -> pa.Array | list[object]:
    """The values of ``in`` as :func:`_typed` takes one (text parsed, a misspelt one refused)."""
    if arrow_type is None:
        return values
    try:
        return pa.array(values, arrow_type)
    except _ARROW_CONVERSION:
        pass
    scalars = [None if v is None else _typed(v, arrow_type, column) for v in values]
    if all(s is None or s.type == arrow_type for s in scalars):
        return pa.array([None if s is None else s.as_py() for s in scalars], arrow_type)
    return values


def to_expression(
    predicates: Iterable[Predicate], schema: pa.Schema | None = None
) -> pc.Expression | None:
    """The conjunction of ``predicates`` as an Expression; None when there are none."""
    result: pc.Expression | None = None
    for predicate in predicates:
        expression = predicate.to_expression(schema)
        result = expression if result is None else result & expression
    return result


def _ordinal(scalar: pa.Scalar) -> object:
    """A Python value that orders like the Arrow value (temporal values as their integers)."""
    t = scalar.type
    if pa.types.is_timestamp(t) or pa.types.is_time(t) or pa.types.is_date(t):
        width = pa.int64() if t.bit_width == 64 else pa.int32()
        return scalar.cast(width).as_py()
    return scalar.as_py()


def _as_column_value(value: object, arrow_type: pa.DataType) -> object | None:
    """``value`` converted to the column type and made orderable; None if it does not convert."""
    try:
        scalar = value if isinstance(value, pa.Scalar) else _converted(value, arrow_type)
        if scalar is None:
            return None
        scalar = scalar.cast(arrow_type)
    except _ARROW_CONVERSION:
        return None
    if not scalar.is_valid:
        return None
    ordinal = _ordinal(scalar)
    return None if isinstance(ordinal, float) and math.isnan(ordinal) else ordinal


def _bound(value: StatValue, arrow_type: pa.DataType) -> object | None:
    try:
        return _as_column_value(decode_stat(value, arrow_type), arrow_type)
    except (ValueError, TypeError, pa.ArrowException):
        return None  # an unreadable bound is no bound


def _bounds_allow(op: str, low: object, high: object, value: object) -> bool:
    """Whether some v in [low, high] satisfies ``v op value``; None bounds are unbounded."""
    if op == "=":
        return (low is None or low <= value) and (high is None or value <= high)  # type: ignore[operator]
    if op == "!=":
        return not (low is not None and low == high == value)
    if op in ("<", "<="):
        return low is None or (low < value if op == "<" else low <= value)  # type: ignore[operator]
    return high is None or (high > value if op == ">" else high >= value)  # type: ignore[operator]


def _null_test_allows(op: str, stats: ColumnStats, row_count: int) -> bool:
    if op == "is_null":
        return stats.null_count > 0
    return stats.null_count < row_count


def _values(predicate: Predicate) -> list[object]:
    value = predicate.value
    if predicate.op == "in" and isinstance(value, tuple | list | frozenset | set):
        return list(value)
    return [value]


def may_match(
    predicate: Predicate, stats: ColumnStats | None, arrow_type: pa.DataType, row_count: int
) -> bool:
    """Whether a file whose column has ``stats`` may hold a row satisfying ``predicate``."""
    if stats is None:
        return True
    if predicate.op in ("is_null", "is_not_null"):
        return _null_test_allows(predicate.op, stats, row_count)
    if row_count > 0 and stats.null_count >= row_count:
        return False  # every value is null: no comparison holds
    if not has_min_max(arrow_type) or (pa.types.is_floating(arrow_type) and predicate.op == "!="):
        return True  # NaN is unequal to everything and is not in the bounds
    low, high = _bound(stats.min, arrow_type), _bound(stats.max, arrow_type)
    op = "=" if predicate.op == "in" else predicate.op
    for raw in _values(predicate):
        value = _as_column_value(raw, arrow_type)
        if value is None or _bounds_allow(op, low, high, value):
            return True
    return False


def may_contain(file: DataFile, predicates: Sequence[Predicate], schema: pa.Schema) -> bool:
    """Whether ``file`` may hold rows satisfying every predicate (columns typed by ``schema``).

    Predicates on columns unknown to ``schema`` prune nothing.
    """
    for predicate in predicates:
        index = schema.get_field_index(predicate.column)
        if index < 0:
            continue
        stats = file.stats.get(predicate.column)
        if not may_match(predicate, stats, schema.field(index).type, file.row_count):
            return False
    return True
