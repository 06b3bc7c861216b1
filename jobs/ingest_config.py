"""``lakestream ingest --config ingest.yaml``: the ingest job's settings.

The YAML file gives the structure; environment variables override any key (the sources and
their order: :mod:`jobs.settings`): ``LAKESTREAM_INGEST__KAFKA__BOOTSTRAP_SERVERS=...``,
``LAKESTREAM_CATALOG__DSN=...``. Secrets (the catalog DSN, Kafka options such as
``sasl.password``) are ``SecretStr`` and never reach logs.

Topics go to tables by ``tables.debezium_topic_tables`` (Debezium topics: overrides of the
``server.schema.table`` naming) or ``tables.json_topic_tables`` (plain JSON topics: the table each
one appends to). The old ``tables.topic_tables`` meant one or the other by ``source.format``; it
is still read, as the key of the configured format, with a warning naming the new key.

``tables.declare`` gives the columns and key of tables that do not exist yet, for topics whose
messages carry no schema (types: :mod:`jobs.column_types`); ``dead_letters`` names the
dead-letter table and the guard against dead-lettering whole topics (:mod:`ingest.sink.guard`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal

import pyarrow as pa
from pydantic import Field, SecretStr, field_validator, model_validator

from catalog import DEFAULT_HASH_BUCKETS
from ingest.config import IngestJobConfig
from ingest.debezium import DecoderConfig
from ingest.debezium.avro import AvroDecoding
from ingest.formats import Converter, SourceFormat
from ingest.kafka.errors import DEFAULT_BROKER_OUTAGE_BUDGET_S
from ingest.kafka.spark_source import SourceReader
from ingest.sink.guard import DeadLetterGuard
from ingest.transactions import (
    DEFAULT_MAX_HOLD_S,
    DEFAULT_PARTITION_IDLE_S,
    OnTimeout,
    TransactionMode,
)
from jobs.column_types import column_field
from jobs.settings import CatalogSettings, CommandSettings, Section

_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_DEAD_LETTER_TABLE = "lakestream.dead_letters"
_ROUTES = {
    SourceFormat.DEBEZIUM: "debezium_topic_tables",
    SourceFormat.JSON: "json_topic_tables",
}


class CatalogSection(CatalogSettings):
    dsn: SecretStr


class KafkaSection(Section):
    bootstrap_servers: str
    options: dict[str, SecretStr] = Field(default_factory=dict)
    """librdkafka settings (security.protocol, sasl.*, ssl.*), passed through."""
    outage_budget: float = Field(default=DEFAULT_BROKER_OUTAGE_BUDGET_S, ge=0)
    """Seconds a broker outage is waited out while the job runs (one warning per retry) before
    the job stops (exit code 1); at start-up the brokers must answer within ~10 s."""


class SchemaRegistrySection(Section):
    """The Confluent-compatible schema registry of ``source.converter: avro`` (Confluent's,
    Apicurio's ``/apis/ccompat/v7``, Karapace): the one Connect's Avro converter writes to."""

    url: str
    """``http(s)://host:port[/path]``, e.g. ``http://registry:8080/apis/ccompat/v7``."""
    options: dict[str, SecretStr] = Field(default_factory=dict)
    """confluent-kafka ``SchemaRegistryClient`` settings (``basic.auth.user.info``,
    ``bearer.auth.*``, ``ssl.*``, ``timeout``, ``max.retries``), passed through."""

    def decoding(self) -> AvroDecoding:
        """Checked here (unknown or malformed options fail the configuration, not a task)."""
        options = {k: v.get_secret_value() for k, v in self.options.items()}
        decoding = AvroDecoding.of(self.url, options)
        decoding.check()
        return decoding


class SourceSection(Section):
    format: SourceFormat = SourceFormat.DEBEZIUM
    topics: list[str] = Field(default_factory=list)
    pattern: str | None = None
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_offsets_per_trigger: int | None = Field(default=1_000_000, gt=0)
    """Bounds a micro-batch, and with it a write task's memory: a task holds its share of the
    batch's messages while it decodes them. ``null`` lifts the bound (a backlog then becomes
    one batch)."""
    converter: Converter = Converter.JSON
    """How Debezium's topics are encoded, as Connect's ``value.converter`` wrote them: ``json``
    (JsonConverter) or ``avro`` (an Avro converter in Confluent's wire format, whose schemas
    come from ``schema_registry``). Keys are read the same way (an Avro key is recognised by
    its wire format; a JSON key is taken as it is)."""
    reader: SourceReader = SourceReader.PYTHON
    """``python`` (lakestream's source: offset ranges, read by the write tasks with librdkafka)
    or ``spark`` (Spark's built-in Kafka source, jars fetched from Maven Central once; not with
    ``transactions: consistent``). See docs/ingest.md."""


class DeclaredTable(Section):
    """A CDC table the job creates, with these columns, when its topic first brings rows.

    Used only while the table does not exist: the catalog's schema decides once it does.
    """

    primary_key: list[str] = Field(min_length=1)
    columns: dict[str, str] = Field(min_length=1)
    """column -> type (see :mod:`jobs.column_types`), in table order."""

    @model_validator(mode="after")
    def _check(self) -> DeclaredTable:
        self.arrow_schema()  # every type parses
        missing = [c for c in self.primary_key if c not in self.columns]
        if missing:
            raise ValueError(f"primary_key column {missing[0]!r} is not among the columns")
        return self

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([column_field(name, text) for name, text in self.columns.items()])


class TablesSection(Section):
    debezium_topic_tables: dict[str, str] = Field(default_factory=dict)
    """Debezium topics: topic -> namespace.table, overriding the naming convention
    (server.schema.table -> schema.table)."""
    json_topic_tables: dict[str, str] = Field(default_factory=dict)
    """Plain JSON topics: topic -> the namespace.table its records are appended to."""
    topic_tables: dict[str, str] | None = None
    """The old name of the two above: the one of ``source.format``. Still read, with a warning."""
    namespaces: dict[str, str] = Field(default_factory=dict)
    primary_keys: dict[str, list[str]] = Field(default_factory=dict)
    hash_buckets: int = Field(default=DEFAULT_HASH_BUCKETS, ge=1, le=65536)
    partition_by: dict[str, list[str]] = Field(default_factory=dict)
    declare: dict[str, DeclaredTable] = Field(default_factory=dict)
    """namespace.table -> columns and key, for schemaless topics of tables not created yet."""

    @field_validator("declare")
    @classmethod
    def _declared_names(cls, value: dict[str, DeclaredTable]) -> dict[str, DeclaredTable]:
        for name in value:
            if not _TABLE_NAME.fullmatch(name):
                raise ValueError(f"declared table {name!r} is not a namespace.table name")
        return {name.lower(): table for name, table in value.items()}


class DeadLettersSection(Section):
    table: str = DEFAULT_DEAD_LETTER_TABLE
    max_ratio: float | None = Field(default=0.5, ge=0, le=1)
    """A batch fails, committing nothing, when a topic's dead letters exceed this share of its
    records; ``null`` turns the guard off."""
    min_count: int = Field(default=10, ge=1)
    """A topic is judged only from this many dead letters in a batch on, so that one poison
    message alone in a batch does not stop the job."""

    def guard(self) -> DeadLetterGuard:
        return DeadLetterGuard(max_ratio=self.max_ratio, min_count=self.min_count)


class TransactionsSection(Section):
    """Source transactions (issue 13): whether each commit shows them whole."""

    mode: TransactionMode = TransactionMode.AUTO
    """``consistent``: each commit publishes a prefix of the source's transactions, each whole
    (incomplete ones are held in the lake); ``eventual``: each commit publishes what its batch
    read; ``auto``: consistent when the subscription includes a ``<prefix>.transaction``
    topic (Debezium's ``provide.transaction.metadata=true``)."""
    max_hold_s: float = Field(default=DEFAULT_MAX_HOLD_S, gt=0)
    """Seconds a transaction may hold back publication (from when the job first saw it)."""
    on_timeout: OnTimeout = OnTimeout.WAIT
    """``wait``: keep holding, warn once a minute; ``publish``: publish it incomplete and name it
    in the commit's source watermark."""
    partition_idle_s: float = Field(default=DEFAULT_PARTITION_IDLE_S, ge=0)
    """With a transaction topic of several partitions: seconds after an END marker was read
    that a partition with nothing more to read counts as read past it (the time the
    connector's producer is given to deliver markers to different partitions)."""


class SparkSection(Section):
    master: str | None = "local[2]"
    """``null`` under spark-submit: the submitter's master and settings are used as they are."""
    conf: dict[str, str] = Field(default_factory=dict)


class MetricsSection(Section):
    """``/metrics`` and ``/healthz`` of the running job (see :mod:`ingest.metrics`)."""

    port: int = Field(default=0, ge=0, le=65535)
    """0: no HTTP server (the default, as the compactor's)."""
    host: str = "0.0.0.0"
    stale_after_s: float = Field(default=300.0, gt=0)
    """/healthz is 503 when no batch committed for this long while records wait."""


class IngestSettings(CommandSettings):
    """``lakestream ingest``: the YAML file's keys, each also an environment variable."""

    command: ClassVar[str | None] = "ingest"

    job: str
    catalog: CatalogSection
    kafka: KafkaSection
    source: SourceSection = Field(default_factory=SourceSection)
    schema_registry: SchemaRegistrySection | None = None
    """Where ``source.converter: avro`` reads the schemas of the messages' ids."""
    tables: TablesSection = Field(default_factory=TablesSection)
    dead_letters: DeadLettersSection = Field(default_factory=DeadLettersSection)
    transactions: TransactionsSection = Field(default_factory=TransactionsSection)
    """Also written as just the mode: ``transactions: consistent``."""
    dead_letter_table: str | None = None
    """The old name of ``dead_letters.table``, still accepted."""
    trigger: str = "available_now"
    """``available_now`` (drain and stop) or an interval such as ``10 seconds``."""
    checkpoint: Path
    spark: SparkSection = Field(default_factory=SparkSection)
    metrics: MetricsSection = Field(default_factory=MetricsSection)

    @field_validator("job")
    @classmethod
    def _job_name(cls, value: str) -> str:
        if not _JOB_NAME.fullmatch(value):
            raise ValueError("job names are letters, digits, '_', '.', '-' (max 128)")
        return value

    @field_validator("transactions", mode="before")
    @classmethod
    def _transactions_shorthand(cls, value: object) -> object:
        """``transactions: consistent`` is ``transactions: {mode: consistent}``."""
        return {"mode": value} if isinstance(value, str) else value

    @field_validator("trigger")
    @classmethod
    def _trigger(cls, value: str) -> str:
        if value != "available_now" and trigger_seconds(value) is None:
            raise ValueError("trigger is 'available_now' or '<number> seconds'")
        return value

    @model_validator(mode="after")
    def _declarations_need_debezium(self) -> IngestSettings:
        if self.tables.declare and self.source.format is not SourceFormat.DEBEZIUM:
            raise ValueError("tables.declare is for debezium topics (source.format: debezium)")
        return self

    @model_validator(mode="after")
    def _transactions_need_debezium(self) -> IngestSettings:
        if (
            self.transactions.mode is TransactionMode.CONSISTENT
            and self.source.format is not SourceFormat.DEBEZIUM
        ):
            raise ValueError(
                "transactions.mode consistent needs Debezium topics (source.format: debezium); "
                "plain JSON topics carry no transaction metadata"
            )
        return self

    @model_validator(mode="after")
    def _avro_needs_a_registry(self) -> IngestSettings:
        avro = self.source.converter is Converter.AVRO
        if avro and self.source.format is not SourceFormat.DEBEZIUM:
            raise ValueError(
                "source.converter: avro is for Debezium topics (source.format: debezium)"
            )
        if avro and self.schema_registry is None:
            raise ValueError("source.converter: avro needs schema_registry.url")
        if not avro and self.schema_registry is not None:
            raise ValueError("schema_registry is read only with source.converter: avro")
        if avro and self.transactions.mode is TransactionMode.CONSISTENT:
            raise ValueError(
                "transactions.mode consistent is not available with source.converter: avro "
                "(its transaction markers and held events are read as JSON); use eventual"
            )
        if self.schema_registry is not None:
            self.schema_registry.decoding()  # the url and options are checked now
        return self

    @model_validator(mode="after")
    def _dead_letter_table(self) -> IngestSettings:
        if self.dead_letter_table is None:
            return self
        if "table" in self.dead_letters.model_fields_set:
            raise ValueError(
                "dead_letter_table is the old name of dead_letters.table: give only the latter"
            )
        self.dead_letters = self.dead_letters.model_copy(update={"table": self.dead_letter_table})
        return self

    @model_validator(mode="after")
    def _topic_tables(self) -> IngestSettings:
        """The routes of the configured format only: a mapping for the other one is a mistake
        (a JSON topic listed under the Debezium overrides would never be appended to)."""
        tables, fmt = self.tables, self.source.format
        new = _ROUTES[fmt]
        for other_format, key in _ROUTES.items():
            if other_format is not fmt and getattr(tables, key):
                raise ValueError(f"tables.{key} is for source.format: {other_format.value}")
        if tables.topic_tables is not None:
            if getattr(tables, new):
                raise ValueError(f"tables.topic_tables is the old name of tables.{new}: give one")
            setattr(tables, new, tables.topic_tables)
        return self

    @classmethod
    def from_yaml(cls, path: Path) -> IngestSettings:
        """Settings from a YAML file, with environment variables taking precedence.

        Raises:
            ConfigError: one line naming the file, the key and what is expected.
        """
        settings: IngestSettings = cls.from_file(path)
        return settings

    def notes(self) -> list[str]:
        notes = []
        if self.tables.topic_tables is not None:
            new = _ROUTES[self.source.format]
            notes.append(f"tables.topic_tables is deprecated: rename it to tables.{new}")
        if self.dead_letter_table is not None:
            notes.append("dead_letter_table is deprecated: write dead_letters.table instead")
        return notes

    def job_config(self) -> IngestJobConfig:
        declared = self.tables.declare
        decoder = DecoderConfig(
            topic_tables=self.tables.debezium_topic_tables,
            namespaces=self.tables.namespaces,
            schemas={name: table.arrow_schema() for name, table in declared.items()},
            primary_keys={
                **{t: tuple(k) for t, k in self.tables.primary_keys.items()},
                **{name: tuple(table.primary_key) for name, table in declared.items()},
            },
            avro=None if self.schema_registry is None else self.schema_registry.decoding(),
        )
        return IngestJobConfig(
            job=self.job,
            bootstrap_servers=self.kafka.bootstrap_servers,
            checkpoint=self.checkpoint,
            dead_letter_table=self.dead_letters.table,
            dead_letter_guard=self.dead_letters.guard(),
            source_format=self.source.format,
            topics=tuple(self.source.topics),
            topic_pattern=self.source.pattern,
            decoder=decoder,
            json_tables=self.tables.json_topic_tables,
            hash_buckets=self.tables.hash_buckets,
            partition_by={t: tuple(c) for t, c in self.tables.partition_by.items()},
            starting_offsets=self.source.starting_offsets,
            max_offsets_per_trigger=self.source.max_offsets_per_trigger,
            source_reader=self.source.reader,
            trigger_seconds=trigger_seconds(self.trigger),
            kafka_options={k: v.get_secret_value() for k, v in self.kafka.options.items()},
            broker_outage_budget_s=self.kafka.outage_budget,
            transactions=self.transactions.mode,
            max_hold_s=self.transactions.max_hold_s,
            on_timeout=self.transactions.on_timeout,
            partition_idle_s=self.transactions.partition_idle_s,
        )


def trigger_seconds(text: str) -> float | None:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|sec|secs|second|seconds)\s*", text)
    return float(match.group(1)) if match else None


def describe(settings: IngestSettings) -> dict[str, Any]:
    """What the job logs about its configuration: no secrets."""
    return {
        "job": settings.job,
        "topics": settings.source.topics,
        "pattern": settings.source.pattern,
        "format": settings.source.format.value,
        "converter": settings.source.converter.value,
        "schema_registry": (
            None
            if settings.schema_registry is None
            else settings.schema_registry.decoding().shown_url
        ),
        "reader": settings.source.reader.value,
        "trigger": settings.trigger,
        "checkpoint": str(settings.checkpoint),
        "kafka_options": sorted(settings.kafka.options),
        "declared_tables": sorted(settings.tables.declare),
        "dead_letters": settings.dead_letters.model_dump(),
        "metrics_port": settings.metrics.port or None,
        "transactions": settings.transactions.model_dump(mode="json"),
        "transaction_mode": settings.job_config().transaction_mode.value,
    }
