"""What the driver asks the brokers: which partitions match the subscription, and their offsets.

One librdkafka consumer serves all questions of a query (it lives in Spark's long-running source
process on the driver). It never subscribes or commits; it exists for metadata and watermark
(ListOffsets) requests. The watermarks follow the consumer's ``isolation.level`` (default
read_committed, where "high" is the last stable offset), which is what the readers will reach.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from ingest.kafka.errors import BrokerQueryError
from ingest.kafka.offsets import Offsets, PartitionId
from ingest.kafka.options import Subscription

#: Identity for librdkafka, which insists on a group id; the source never joins or commits it.
DEFAULT_GROUP_ID = "lakestream-kafka-source"
_QUERY_TIMEOUT_S = 30.0


def consumer_config(
    kafka_config: Mapping[str, str], managed: Mapping[str, str | bool] | None = None
) -> dict[str, Any]:
    """librdkafka settings for any consumer of the source: the user's, plus the managed ones."""
    config: dict[str, Any] = {"group.id": DEFAULT_GROUP_ID, **kafka_config}
    config.update({"enable.auto.commit": False, "enable.auto.offset.store": False})
    config.update(managed or {})
    return config


class BrokerView:
    """Metadata and watermark queries, answered by one consumer; :meth:`close` it after use."""

    def __init__(self, kafka_config: Mapping[str, str], timeout_s: float = _QUERY_TIMEOUT_S):
        self._consumer = Consumer(consumer_config(kafka_config))
        self._timeout_s = timeout_s

    def partitions(self, subscription: Subscription) -> list[PartitionId]:
        """Every partition of every existing topic the subscription matches, sorted.

        Topics are listed without naming them, so that a query never auto-creates a topic.
        """
        try:
            metadata = self._consumer.list_topics(timeout=self._timeout_s)
        except KafkaException as exc:
            raise BrokerQueryError(f"could not list topics: {exc}") from exc
        found = []
        for name, topic in metadata.topics.items():
            if topic.error is None and subscription.matches(name):
                found += [PartitionId(name, number) for number in topic.partitions]
        return sorted(found)

    def watermarks(self, partitions: Iterable[PartitionId]) -> dict[PartitionId, tuple[int, int]]:
        """``(earliest, end)`` of each partition: its first offset and the next offset to come."""
        marks = {}
        for pid in partitions:
            try:
                found = self._consumer.get_watermark_offsets(
                    KafkaPartition(pid.topic, pid.partition), timeout=self._timeout_s
                )
            except KafkaException as exc:
                raise BrokerQueryError(f"could not read the offsets of {pid}: {exc}") from exc
            if found is None:
                raise BrokerQueryError(f"no offsets for {pid} within {self._timeout_s:g}s")
            marks[pid] = (int(found[0]), int(found[1]))
        return marks

    def earliest(self, partitions: Iterable[PartitionId]) -> Offsets:
        return {pid: low for pid, (low, _) in self.watermarks(partitions).items()}

    def latest(self, partitions: Iterable[PartitionId]) -> Offsets:
        return {pid: high for pid, (_, high) in self.watermarks(partitions).items()}

    def close(self) -> None:
        self._consumer.close()
