"""What a job's topics carry. A leaf module: configuration reads it on an install without the
Kafka client or Spark, so a mistake in a configuration file is named before a missing extra."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Converter", "SourceFormat"]


class SourceFormat(StrEnum):
    DEBEZIUM = "debezium"
    JSON = "json"


class Converter(StrEnum):
    """The Kafka Connect converter that wrote a Debezium job's topics (Connect's
    ``value.converter``): the envelope is the same, its encoding is not.

    * ``json``: Connect's ``JsonConverter``, with or without embedded schemas.
    * ``avro``: an Avro converter writing Confluent's wire format (a zero byte, the schema's
      registry id, the Avro body): Confluent's ``AvroConverter``, or Apicurio's with
      ``apicurio.registry.as-confluent=true`` and ``apicurio.registry.headers.enabled=false``.
      The schemas are read from the registry named by ``schema_registry.url``.
    """

    JSON = "json"
    AVRO = "avro"
