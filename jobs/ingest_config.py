"""``lakestream ingest --config ingest.yaml``: the ingest job's settings.

YAML gives the structure; environment variables override any field
(``LAKESTREAM_INGEST_KAFKA__BOOTSTRAP_SERVERS=...``). Secrets (the catalog DSN, Kafka options
such as ``sasl.password``) are ``SecretStr`` and never reach logs.

``tables.declare`` gives the columns and key of tables that do not exist yet, for topics whose
messages carry no schema (types: :mod:`jobs.column_types`); ``dead_letters`` names the
dead-letter table and the guard against dead-lettering whole topics (:mod:`ingest.sink.guard`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from catalog.outage import DEFAULT_OUTAGE_BUDGET_S
from ingest.debezium import DecoderConfig
from ingest.job import IngestJobConfig
from ingest.kafka.outage import DEFAULT_BROKER_OUTAGE_BUDGET_S
from ingest.sink.guard import DeadLetterGuard
from ingest.sink.plan import SourceFormat
from jobs.column_types import column_field

_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_DEAD_LETTER_TABLE = "lakestream.dead_letters"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CatalogSection(_Section):
    dsn: SecretStr
    warehouse: Path | None = None
    outage_budget: float = Field(default=DEFAULT_OUTAGE_BUDGET_S, ge=0)
    """Seconds a catalog outage is waited out before the job stops (exit code 1); 0: stop at
    the first failed catalog call."""


class KafkaSection(_Section):
    bootstrap_servers: str
    options: dict[str, SecretStr] = Field(default_factory=dict)
    """librdkafka settings (security.protocol, sasl.*, ssl.*), passed through."""
    outage_budget: float = Field(default=DEFAULT_BROKER_OUTAGE_BUDGET_S, ge=0)
    """Seconds a broker outage is waited out while the job runs (one warning per retry) before
    the job stops (exit code 1); at start-up the brokers must answer within ~10 s."""


class SourceSection(_Section):
    format: SourceFormat = SourceFormat.DEBEZIUM
    topics: list[str] = Field(default_factory=list)
    pattern: str | None = None
    starting_offsets: Literal["earliest", "latest"] = "earliest"
    max_offsets_per_trigger: int | None = Field(default=1_000_000, gt=0)
    """Bounds a micro-batch, and with it a write task's memory: a task holds its share of the
    batch's messages while it decodes them. ``null`` lifts the bound (a backlog then becomes
    one batch)."""


class DeclaredTable(_Section):
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


class TablesSection(_Section):
    topic_tables: dict[str, str] = Field(default_factory=dict)
    """topic -> namespace.table; default for Debezium: server.schema.table -> schema.table."""
    namespaces: dict[str, str] = Field(default_factory=dict)
    primary_keys: dict[str, list[str]] = Field(default_factory=dict)
    hash_buckets: int = Field(default=4, ge=1, le=65536)
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


class DeadLettersSection(_Section):
    table: str = DEFAULT_DEAD_LETTER_TABLE
    max_ratio: float | None = Field(default=0.5, ge=0, le=1)
    """A batch fails, committing nothing, when a topic's dead letters exceed this share of its
    records; ``null`` turns the guard off."""
    min_count: int = Field(default=10, ge=1)
    """A topic is judged only from this many dead letters in a batch on, so that one poison
    message alone in a batch does not stop the job."""

    def guard(self) -> DeadLetterGuard:
        return DeadLetterGuard(max_ratio=self.max_ratio, min_count=self.min_count)


class SparkSection(_Section):
    master: str | None = "local[2]"
    """``null`` under spark-submit: the submitter's master and settings are used as they are."""
    conf: dict[str, str] = Field(default_factory=dict)


class IngestSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="LAKESTREAM_INGEST_", env_nested_delimiter="__", extra="forbid"
    )

    job: str
    catalog: CatalogSection
    kafka: KafkaSection
    source: SourceSection = Field(default_factory=SourceSection)
    tables: TablesSection = Field(default_factory=TablesSection)
    dead_letters: DeadLettersSection = Field(default_factory=DeadLettersSection)
    dead_letter_table: str | None = None
    """The old name of ``dead_letters.table``, still accepted."""
    trigger: str = "available_now"
    """``available_now`` (drain and stop) or an interval such as ``10 seconds``."""
    checkpoint: Path
    spark: SparkSection = Field(default_factory=SparkSection)
    log_level: str = "INFO"

    @field_validator("job")
    @classmethod
    def _job_name(cls, value: str) -> str:
        if not _JOB_NAME.fullmatch(value):
            raise ValueError("job names are letters, digits, '_', '.', '-' (max 128)")
        return value

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
    def _dead_letter_table(self) -> IngestSettings:
        if self.dead_letter_table is None:
            return self
        if "table" in self.dead_letters.model_fields_set:
            raise ValueError(
                "dead_letter_table is the old name of dead_letters.table: give only the latter"
            )
        self.dead_letters = self.dead_letters.model_copy(update={"table": self.dead_letter_table})
        return self

    @classmethod
    def from_yaml(cls, path: Path) -> IngestSettings:
        """Settings from a YAML file, with environment variables taking precedence."""
        if not path.is_file():
            raise FileNotFoundError(f"ingest config {path} does not exist")

        class FromFile(cls):  # type: ignore[valid-type,misc]
            model_config = SettingsConfigDict(**{**cls.model_config, "yaml_file": path})

        settings: IngestSettings = FromFile()
        return settings

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, YamlConfigSettingsSource(settings_cls))

    def job_config(self) -> IngestJobConfig:
        declared = self.tables.declare
        decoder = DecoderConfig(
            topic_tables=self.tables.topic_tables
            if self.source.format is SourceFormat.DEBEZIUM
            else {},
            namespaces=self.tables.namespaces,
            schemas={name: table.arrow_schema() for name, table in declared.items()},
            primary_keys={
                **{t: tuple(k) for t, k in self.tables.primary_keys.items()},
                **{name: tuple(table.primary_key) for name, table in declared.items()},
            },
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
            json_tables=self.tables.topic_tables if self.source.format is SourceFormat.JSON else {},
            hash_buckets=self.tables.hash_buckets,
            partition_by={t: tuple(c) for t, c in self.tables.partition_by.items()},
            starting_offsets=self.source.starting_offsets,
            max_offsets_per_trigger=self.source.max_offsets_per_trigger,
            trigger_seconds=trigger_seconds(self.trigger),
            kafka_options={k: v.get_secret_value() for k, v in self.kafka.options.items()},
            broker_outage_budget_s=self.kafka.outage_budget,
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
        "trigger": settings.trigger,
        "checkpoint": str(settings.checkpoint),
        "kafka_options": sorted(settings.kafka.options),
        "declared_tables": sorted(settings.tables.declare),
        "dead_letters": settings.dead_letters.model_dump(),
    }
