"""The ingest job's configuration, as the library takes it: explicit values, no environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from catalog import DEFAULT_HASH_BUCKETS
from ingest.debezium import DecoderConfig
from ingest.failpoints import FailAt
from ingest.formats import SourceFormat
from ingest.kafka.errors import DEFAULT_BROKER_OUTAGE_BUDGET_S
from ingest.kafka.spark_source import SourceReader
from ingest.sink.guard import DeadLetterGuard
from ingest.transactions.policy import (
    DEFAULT_MAX_HOLD_S,
    DEFAULT_PARTITION_IDLE_S,
    OnTimeout,
    TransactionConfigError,
    TransactionMode,
    resolve_mode,
)

__all__ = ["IngestJobConfig"]


@dataclass(frozen=True)
class IngestJobConfig:
    """What an ingest job is configured with, defined once: the job (:mod:`ingest.job`) and its
    sink (:mod:`ingest.sink.batch`) read it; ``lakestream ingest`` builds it from its settings
    (:mod:`jobs.ingest_config`)."""

    job: str
    bootstrap_servers: str
    checkpoint: Path
    dead_letter_table: str
    source_format: SourceFormat = SourceFormat.DEBEZIUM
    topics: tuple[str, ...] = ()
    topic_pattern: str | None = None
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    json_tables: Mapping[str, str] = field(default_factory=dict)
    hash_buckets: int = DEFAULT_HASH_BUCKETS
    partition_by: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    trigger_seconds: float | None = None
    """None: Trigger.AvailableNow (process what is there, then stop)."""
    kafka_options: Mapping[str, str] = field(default_factory=dict, repr=False)
    broker_outage_budget_s: float = DEFAULT_BROKER_OUTAGE_BUDGET_S
    """Seconds a broker outage is waited out (planning, and reads without progress)."""
    fail_at: FailAt | None = None
    """Fault injection for crash tests (see :mod:`ingest.failpoints`); never set in production."""
    dead_letter_guard: DeadLetterGuard = field(default_factory=DeadLetterGuard)
    transactions: TransactionMode = TransactionMode.AUTO
    """Whether each commit publishes whole source transactions (:mod:`ingest.transactions`);
    read the resolved mode from :attr:`transaction_mode`."""
    max_hold_s: float = DEFAULT_MAX_HOLD_S
    """Seconds a transaction may block publication before ``on_timeout`` applies."""
    on_timeout: OnTimeout = OnTimeout.WAIT
    partition_idle_s: float = DEFAULT_PARTITION_IDLE_S
    """With a transaction topic of several partitions: seconds after an END was read that a
    partition with nothing more to read counts as past it (:mod:`ingest.transactions.order`)."""
    source_reader: SourceReader = SourceReader.PYTHON
    """What reads Kafka: lakestream's Python source (ranges, read by the sink's tasks) or
    Spark's built-in Kafka source (records: :mod:`ingest.kafka.spark_source`,
    :mod:`ingest.sink.records`)."""

    def __post_init__(self) -> None:
        if not self.max_hold_s > 0:
            raise TransactionConfigError(f"max_hold_s must be positive, not {self.max_hold_s}")
        if not self.partition_idle_s >= 0:
            raise TransactionConfigError(
                f"partition_idle_s must be 0 or more, not {self.partition_idle_s}"
            )
        if (
            self.transactions is TransactionMode.CONSISTENT
            and self.source_format is not SourceFormat.DEBEZIUM
        ):
            raise TransactionConfigError("transactions: consistent needs Debezium topics")
        if self.transactions is TransactionMode.CONSISTENT and self.decoder.avro is not None:
            raise TransactionConfigError(
                "transactions: consistent reads Debezium's transaction topic and holds events as "
                "JSON; with source.converter: avro use transactions: eventual"
            )
        if (
            self.source_reader is SourceReader.SPARK
            and self.transaction_mode is TransactionMode.CONSISTENT
        ):
            raise TransactionConfigError(
                "transactions: consistent needs source.reader: python (its driver and tasks work "
                "on offset ranges); set transactions: eventual, or source.reader: python"
            )

    @property
    def transaction_mode(self) -> TransactionMode:
        """``consistent`` or ``eventual``: ``auto`` decided by the subscription (consistent when
        it includes a ``<prefix>.transaction`` topic; never for plain JSON topics, nor yet for
        Avro-encoded ones)."""
        if self.source_format is not SourceFormat.DEBEZIUM or self.decoder.avro is not None:
            return TransactionMode.EVENTUAL
        return resolve_mode(self.transactions, self.topics, self.topic_pattern)
