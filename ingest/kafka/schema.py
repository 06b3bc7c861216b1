"""The rows the source produces, and their Arrow form built straight from librdkafka messages.

The columns are those of Spark's built-in Kafka source, so downstream code (Debezium decoding,
dead letters) does not care which of the two produced a DataFrame:

========== ============================== =====================================================
column     Spark type                     meaning
========== ============================== =====================================================
key        binary                         record key; null for keyless records
value      binary                         record value; null for tombstones
topic      string
partition  int
offset     bigint
timestamp  timestamp                      record timestamp (ms precision); null if the record
                                          has none
timestampType int                         -1 none, 0 CreateTime, 1 LogAppendTime (Kafka's ids)
headers    array<struct<key: string,      only with ``includeHeaders=true``; in record order,
           value: binary>>                duplicates kept
========== ============================== =====================================================
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Message
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ingest.kafka.offsets import OffsetRange

#: The rows of ``emit=ranges``: one per planned offset range ``[startOffset, endOffset)``.
RANGE_SCHEMA = StructType(
    [
        StructField("topic", StringType(), nullable=False),
        StructField("partition", IntegerType(), nullable=False),
        StructField("startOffset", LongType(), nullable=False),
        StructField("endOffset", LongType(), nullable=False),
    ]
)

_HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def kafka_schema(include_headers: bool) -> StructType:
    """The Spark schema of the source's rows (see the module docstring)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(_HEADER)))
    return StructType(fields)


def source_schema(include_headers: bool, ranges: bool) -> StructType:
    """The schema of the source's rows for its options (records or ranges)."""
    return RANGE_SCHEMA if ranges else kafka_schema(include_headers)


def range_batch(ranges: Sequence[OffsetRange], target: pa.Schema) -> pa.RecordBatch:
    """The batch of ``emit=ranges`` for an input partition's planned ranges, a row each."""
    return pa.RecordBatch.from_pylist(
        [{"topic": rng.topic, "partition": rng.partition, "startOffset": rng.start,
          "endOffset": rng.end} for rng in ranges],
        schema=target,
    )  # fmt: skip


def ranges_of(batch: pa.RecordBatch) -> list[OffsetRange]:
    """The offset ranges held by a batch of ``emit=ranges`` rows."""
    columns = [batch.column(name).to_pylist() for name in RANGE_SCHEMA.fieldNames()]
    return [OffsetRange(*row) for row in zip(*columns, strict=True)]


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects from ``read()``: derived the way PySpark's worker does.

    PySpark compares a returned batch's schema with exactly this (timestamps as microseconds in
    UTC, its own list-item naming and nullability), so it is computed, not written out by hand.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def record_batch(messages: Sequence[Message], target: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch from consumed librdkafka messages of a single partition.

    ``messages`` must be data messages (no error events). Columns are built from Python lists in
    one pass each (the cheapest way out of confluent-kafka's per-message objects), the rest with
    Arrow compute.
    """
    count = len(messages)
    first = messages[0]
    kinds, millis = zip(*[m.timestamp() for m in messages], strict=True)
    kind = pa.array(kinds, pa.int32())
    columns = {
        "key": pa.array([m.key() for m in messages], pa.binary()),
        "value": pa.array([m.value() for m in messages], pa.binary()),
        "topic": pa.array([first.topic()] * count, pa.string()),
        "partition": pa.array([first.partition()] * count, pa.int32()),
        "offset": pa.array([m.offset() for m in messages], pa.int64()),
        "timestamp": _timestamps(kind, millis, target.field("timestamp").type),
        # librdkafka: 0 none, 1 create, 2 log-append; Kafka's (and Spark's) ids are one lower.
        "timestampType": pc.subtract(kind, 1),
    }
    if "headers" in target.names:
        columns["headers"] = pa.array(
            [m.headers() or [] for m in messages], target.field("headers").type
        )
    return pa.RecordBatch.from_arrays([columns[name] for name in target.names], schema=target)


def _timestamps(kind: pa.Array, millis: Sequence[int], target_type: pa.DataType) -> pa.Array:
    """Milliseconds since the epoch, null where librdkafka says the record has no timestamp."""
    known = pa.array(millis, pa.int64())
    missing = pc.equal(kind, 0)
    stamped = pc.if_else(missing, pa.scalar(None, pa.int64()), known)
    return stamped.cast(pa.timestamp("ms", tz="UTC")).cast(target_type)


def offset_of(message: Message) -> int:
    """A message's offset; librdkafka sets one on every record and end-of-partition event."""
    offset = message.offset()
    return -1 if offset is None else offset
