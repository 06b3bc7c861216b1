"""From a table's Arrow schema to the Spark schema a read returns.

Every Arrow type maps to the Spark type that holds all of its values exactly; unsigned integers
go one size up (``uint64`` to ``DECIMAL(20, 0)``), because Spark has no unsigned types.
Timestamps with a time zone are instants (``TIMESTAMP``), without one they are wall-clock
times (``TIMESTAMP_NTZ``). A type with no faithful Spark counterpart (durations, intervals,
extension types, decimals wider than 38 digits) is refused at ``load()`` naming the column,
rather than read lossily.

``TIME`` columns map to Spark's ``TIME(6)``, a preview type in Spark 4: rows come back, but most
queries over such a DataFrame (``count()``, filters) fail with ``UNSUPPORTED_TIME_TYPE`` unless
the session sets ``spark.sql.timeType.enabled=true``, or the read names a schema without them.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    TimeType,
)

from ingest.spark_read.errors import UnsupportedTypeError

_MAX_DECIMAL_DIGITS = 38  # Spark's DecimalType.MAX_PRECISION

_INTEGERS: dict[pa.DataType, Callable[[], DataType]] = {
    pa.int8(): ByteType,
    pa.int16(): ShortType,
    pa.int32(): IntegerType,
    pa.int64(): LongType,
    pa.uint8(): ShortType,
    pa.uint16(): IntegerType,
    pa.uint32(): LongType,
    pa.uint64(): lambda: DecimalType(20, 0),
}

_SCALARS: tuple[tuple[Callable[[pa.DataType], bool], Callable[[], DataType]], ...] = (
    (pa.types.is_boolean, BooleanType),
    (pa.types.is_float16, FloatType),
    (pa.types.is_float32, FloatType),
    (pa.types.is_float64, DoubleType),
    (pa.types.is_string, StringType),
    (pa.types.is_large_string, StringType),
    (pa.types.is_string_view, StringType),
    (pa.types.is_binary, BinaryType),
    (pa.types.is_large_binary, BinaryType),
    (pa.types.is_binary_view, BinaryType),
    (pa.types.is_fixed_size_binary, BinaryType),
    (pa.types.is_date, DateType),
    (pa.types.is_time, lambda: TimeType(6)),
    (pa.types.is_null, NullType),
)


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of a table; :class:`UnsupportedTypeError` names the first bad column."""
    return StructType([_field(f, f.name) for f in schema])


def spark_type(arrow_type: pa.DataType, column: str) -> DataType:
    """The Spark type holding every value of ``arrow_type`` (``column`` names it in errors)."""
    if isinstance(arrow_type, pa.ExtensionType):
        raise UnsupportedTypeError(column, arrow_type, "extension types are not mapped")
    if pa.types.is_dictionary(arrow_type):
        return spark_type(arrow_type.value_type, column)
    if pa.types.is_integer(arrow_type):
        return _INTEGERS[arrow_type]()
    if pa.types.is_decimal(arrow_type):
        return _decimal(arrow_type, column)
    if pa.types.is_timestamp(arrow_type):
        return TimestampType() if arrow_type.tz is not None else TimestampNTZType()
    for matches, make in _SCALARS:
        if matches(arrow_type):
            return make()
    return _nested(arrow_type, column)


def _field(field: pa.Field, column: str) -> StructField:
    return StructField(field.name, spark_type(field.type, column), nullable=field.nullable)


def _decimal(arrow_type: pa.DataType, column: str) -> DecimalType:
    precision, scale = arrow_type.precision, arrow_type.scale
    if precision > _MAX_DECIMAL_DIGITS:
        raise UnsupportedTypeError(column, arrow_type, "Spark decimals hold at most 38 digits")
    if not 0 <= scale <= precision:
        raise UnsupportedTypeError(column, arrow_type, "Spark needs 0 <= scale <= precision")
    return DecimalType(precision, scale)


def _nested(arrow_type: pa.DataType, column: str) -> DataType:
    if _is_list(arrow_type):
        item = arrow_type.value_field
        return ArrayType(spark_type(item.type, f"{column}[]"), containsNull=item.nullable)
    if pa.types.is_map(arrow_type):
        key = spark_type(arrow_type.key_type, f"{column}.key")
        value = arrow_type.item_field
        return MapType(key, spark_type(value.type, f"{column}.value"), value.nullable)
    if pa.types.is_struct(arrow_type):
        fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
        return StructType([_field(f, f"{column}.{f.name}") for f in fields])
    raise UnsupportedTypeError(column, arrow_type)


def _is_list(arrow_type: pa.DataType) -> bool:
    checks = (
        pa.types.is_list,
        pa.types.is_large_list,
        pa.types.is_fixed_size_list,
        pa.types.is_list_view,
        pa.types.is_large_list_view,
    )
    return any(check(arrow_type) for check in checks)
