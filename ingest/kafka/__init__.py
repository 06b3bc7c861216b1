"""Kafka for lakestream: the ``lakestream-kafka`` streaming source and a local broker launcher.

``ingest.kafka.source.register(spark)`` makes the source available. :mod:`ingest.kafka.source`
says how micro-batches are planned, :mod:`ingest.kafka.options` lists the options,
:mod:`ingest.kafka.schema` the row schema. Importing this package does not import pyspark.
"""

from ingest.kafka.errors import (
    BrokerQueryError,
    BrokerUnavailableError,
    DataLossError,
    KafkaOptionError,
    KafkaSourceError,
    RangeIncompleteError,
)

__all__ = [
    "BrokerQueryError",
    "BrokerUnavailableError",
    "DataLossError",
    "KafkaOptionError",
    "KafkaSourceError",
    "RangeIncompleteError",
]
