"""Errors of the Kafka source.

:class:`KafkaSourceError` is the root; it descends from the package root
:class:`~ingest.errors.IngestError`. Every error carries the fields a caller needs
(topic, partition, offsets) rather than only text.
"""

from __future__ import annotations

from ingest.errors import IngestError

#: Seconds a broker outage is waited out before a job gives up (planning, reads without
#: progress); here, beside the error it ends in, so settings read it without the Kafka client.
DEFAULT_BROKER_OUTAGE_BUDGET_S = 300.0


class KafkaSourceError(IngestError):
    """Root of every error raised by ``ingest.kafka``."""


class KafkaOptionError(KafkaSourceError, ValueError):
    """A source option is missing, unknown, contradictory or malformed; raised at ``load()``."""

    def __init__(self, option: str, reason: str) -> None:
        super().__init__(f"lakestream-kafka option {option!r}: {reason}")
        self.option = option
        self.reason = reason


class BrokerQueryError(KafkaSourceError):
    """The driver could not read metadata or watermarks from the brokers in time.

    ``timed_out``: the brokers gave no answer at all (rather than an error) within the timeout.
    ``transient``: an answer that the brokers' own metadata contradicted a moment later (a
    partition reported unknown while a broker shut down): an outage, not a refusal.
    """

    def __init__(self, message: str, *, timed_out: bool = False, transient: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        self.transient = transient


class BrokerUnavailableError(KafkaSourceError):
    """The brokers could not be reached for longer than the outage budget (or at start-up)."""

    def __init__(
        self, *, bootstrap_servers: str, outage_s: float, attempts: int, error: str
    ) -> None:
        super().__init__(
            f"kafka brokers {bootstrap_servers} unreachable for {outage_s:.0f}s "
            f"({attempts} attempts): {error}"
        )
        self.bootstrap_servers = bootstrap_servers
        self.outage_s = outage_s
        self.attempts = attempts
        self.error = error


class DataLossError(KafkaSourceError):
    """Offsets the query still needs are gone (retention, truncation, a recreated topic).

    Raised only while ``failOnDataLoss`` is true (the default).
    """

    def __init__(self, topic: str, partition: int, reason: str) -> None:
        super().__init__(
            f"data loss in {topic}-{partition}: {reason} (set failOnDataLoss=false "
            "to skip what is gone and go on)"
        )
        self.topic = topic
        self.partition = partition
        self.reason = reason


class RangeIncompleteError(KafkaSourceError):
    """A planned offset range could not be read to its end before the poll timeout.

    ``reached`` is the next offset the reader would have returned; ``end_of_partition`` is the
    offset at which the broker last reported the end of the partition (``None`` if it never did).
    """

    def __init__(
        self,
        *,
        topic: str,
        partition: int,
        start: int,
        end: int,
        reached: int,
        end_of_partition: int | None,
        timeout_s: float,
    ) -> None:
        super().__init__(
            f"could not read {topic}-{partition} offsets [{start}, {end}): stopped at {reached} "
            f"after {timeout_s:g}s without progress (broker end of partition: {end_of_partition})"
        )
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.reached = reached
        self.end_of_partition = end_of_partition
