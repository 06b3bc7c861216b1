"""What a job's topics carry. A leaf module: configuration reads it on an install without the
Kafka client or Spark, so a mistake in a configuration file is named before a missing extra."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["SourceFormat"]


class SourceFormat(StrEnum):
    DEBEZIUM = "debezium"
    JSON = "json"
