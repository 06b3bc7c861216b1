"""What the driver asks the brokers: which partitions match the subscription, and their offsets.

One librdkafka consumer serves all questions of a query (it lives in Spark's long-running source
process on the driver). It never subscribes or commits; it exists for metadata and watermark
(ListOffsets) requests. The watermarks follow the consumer's ``isolation.level`` (default
read_committed, where "high" is the last stable offset), which is what the readers will reach.

Every query goes through a :class:`~ingest.kafka.outage.BrokerGuard`, which waits out a broker
outage within its budget; :func:`check_brokers` is the job's start-up check, which waits only a
few seconds, so that a wrong address is reported before Spark starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaPartition

from ingest.kafka.errors import BrokerQueryError
from ingest.kafka.offsets import Offsets, PartitionId
from ingest.kafka.options import Subscription
from ingest.kafka.outage import BrokerGuard, BrokerOutagePolicy
from ingest.logs import KAFKA_LOG_LEVEL, kafka_logger

#: Identity for librdkafka, which insists on a group id; the source never joins or commits it.
DEFAULT_GROUP_ID = "lakestream-kafka-source"
#: The start-up check: a few short attempts, well within the 15 s a user should wait to learn
#: that the brokers are not there.
STARTUP_CHECK = BrokerOutagePolicy(budget=7.0, base_delay=0.5, max_delay=1.0, call_timeout=2.5)


def consumer_config(
    kafka_config: Mapping[str, str], managed: Mapping[str, str | bool] | None = None
) -> dict[str, Any]:
    """librdkafka settings for any consumer of the source: the user's, plus the managed ones."""
    config: dict[str, Any] = {
        "group.id": DEFAULT_GROUP_ID,
        "log_level": KAFKA_LOG_LEVEL,
        **kafka_config,
    }
    config.update({"enable.auto.commit": False, "enable.auto.offset.store": False})
    config.update(managed or {})
    config["logger"] = kafka_logger()  # never raw on stderr (see ingest.logs)
    return config


def check_brokers(
    kafka_config: Mapping[str, str], policy: BrokerOutagePolicy = STARTUP_CHECK
) -> int:
    """The number of topics the brokers list, asked with short, bounded retries.

    Raises:
        BrokerUnavailableError: no answer within ``policy.budget``, naming the bootstrap servers.
    """
    view = BrokerView(kafka_config, policy)
    try:
        return view.topic_count()
    finally:
        view.close()


class BrokerView:
    """Metadata and watermark queries, answered by one consumer; :meth:`close` it after use."""

    def __init__(
        self, kafka_config: Mapping[str, str], policy: BrokerOutagePolicy | None = None
    ) -> None:
        policy = policy or BrokerOutagePolicy()
        self._consumer = Consumer(consumer_config(kafka_config))
        self._timeout_s = policy.call_timeout
        self._guard = BrokerGuard(kafka_config.get("bootstrap.servers", "?"), policy)

    def topic_count(self) -> int:
        return len(self._guard.call("list topics", self._list_topics).topics)

    def partitions(self, subscription: Subscription) -> list[PartitionId]:
        """Every partition of every existing topic the subscription matches, sorted.

        Topics are listed without naming them, so that a query never auto-creates a topic.
        """
        metadata = self._guard.call("list topics", self._list_topics)
        found = []
        for name, topic in metadata.topics.items():
            if topic.error is None and subscription.matches(name):
                found += [PartitionId(name, number) for number in topic.partitions]
        return sorted(found)

    def watermarks(self, partitions: Iterable[PartitionId]) -> dict[PartitionId, tuple[int, int]]:
        """``(earliest, end)`` of each partition: its first offset and the next offset to come."""
        return {
            pid: self._guard.call(f"read the offsets of {pid}", partial(self._watermarks, pid))
            for pid in partitions
        }

    def earliest(self, partitions: Iterable[PartitionId]) -> Offsets:
        return {pid: low for pid, (low, _) in self.watermarks(partitions).items()}

    def latest(self, partitions: Iterable[PartitionId]) -> Offsets:
        return {pid: high for pid, (_, high) in self.watermarks(partitions).items()}

    def close(self) -> None:
        self._consumer.close()

    def _list_topics(self) -> Any:
        try:
            return self._consumer.list_topics(timeout=self._timeout_s)
        except KafkaException as exc:
            raise BrokerQueryError(f"could not list topics: {_text(exc)}") from exc

    def _watermarks(self, pid: PartitionId) -> tuple[int, int]:
        try:
            found = self._consumer.get_watermark_offsets(
                KafkaPartition(pid.topic, pid.partition), timeout=self._timeout_s
            )
        except KafkaException as exc:
            text = f"could not read the offsets of {pid}: {_text(exc)}"
            if _unknown_partition(exc) and self._still_listed(pid):
                raise BrokerQueryError(text, transient=True) from None
            raise BrokerQueryError(text) from exc
        if found is None:
            raise BrokerQueryError(
                f"no offsets for {pid} within {self._timeout_s:g}s", timed_out=True
            )
        return int(found[0]), int(found[1])

    def _still_listed(self, pid: PartitionId) -> bool:
        """Whether the brokers' metadata, asked again, names ``pid``; also True when they
        cannot be asked (they are going away: the outage is what the next call meets).

        Why: a broker shutting down answers a partition unknown once, before its connections
        close; a partition really gone is missing from the metadata too."""
        try:
            topic = self._list_topics().topics.get(pid.topic)
        except BrokerQueryError:
            return True
        return topic is not None and topic.error is None and pid.partition in topic.partitions


def _unknown_partition(error: KafkaException) -> bool:
    inner = error.args[0] if error.args else None
    codes = (KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART)
    return isinstance(inner, KafkaError) and inner.code() in codes


def _text(error: KafkaException) -> str:
    """librdkafka's own words (``Local: Broker transport failure``), not the error's repr."""
    inner = error.args[0] if error.args else None
    return inner.str() if isinstance(inner, KafkaError) else str(error)
