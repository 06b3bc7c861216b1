"""lakestream's ingestion: Debezium and event topics from Kafka into catalog tables with Spark.

Every error the package raises derives from :class:`IngestError`; those a caller may want to
tell apart are exported here. The Spark reader's errors (:class:`SparkReadError` and below) are
loaded on first use, so that ``import ingest`` does not import pyspark.
"""

from typing import TYPE_CHECKING

from ingest.debezium.errors import DebeziumError, DecoderConfigError
from ingest.errors import IngestError, SchemaChangeRefused
from ingest.failpoints import InjectedFault
from ingest.kafka.errors import (
    BrokerQueryError,
    DataLossError,
    KafkaOptionError,
    KafkaSourceError,
    RangeIncompleteError,
)
from ingest.sink.guard import TooManyDeadLetters

if TYPE_CHECKING:
    from ingest.spark_read.errors import (
        ColumnReadError,
        ReadOptionError,
        SparkReadError,
        TableReplacedError,
        UnsupportedTypeError,
    )

_SPARK_READ_ERRORS = frozenset(
    {
        "ColumnReadError",
        "ReadOptionError",
        "SparkReadError",
        "TableReplacedError",
        "UnsupportedTypeError",
    }
)


def __getattr__(name: str) -> object:
    if name in _SPARK_READ_ERRORS:
        from ingest.spark_read import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'ingest' has no attribute {name!r}")


__all__ = [
    "BrokerQueryError",
    "ColumnReadError",
    "DataLossError",
    "DebeziumError",
    "DecoderConfigError",
    "IngestError",
    "InjectedFault",
    "KafkaOptionError",
    "KafkaSourceError",
    "RangeIncompleteError",
    "ReadOptionError",
    "SchemaChangeRefused",
    "SparkReadError",
    "TableReplacedError",
    "TooManyDeadLetters",
    "UnsupportedTypeError",
]
