"""Everything an executor task needs to write a batch, shipped once per batch (pickled).

Executors never connect to PostgreSQL: the driver loads each target table's metadata and sends
it along, so a task can route rows to buckets, conform them and write files on its own. The
metadata carries the catalog's storage options (``TableMeta.storage``: how to reach an
object-store warehouse; keys are ``SecretStr`` and left out of every repr), so executors on
other hosts write to the same bucket as the driver would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from catalog import DataFile, TableMeta
from ingest.debezium import DecoderConfig
from ingest.kafka.offsets import OffsetRange
from ingest.kafka.options import SourceOptions


class SourceFormat(StrEnum):
    DEBEZIUM = "debezium"
    JSON = "json"


@dataclass(frozen=True)
class SinkPlan:
    source_format: SourceFormat
    decoder: DecoderConfig
    tables: Mapping[str, TableMeta]
    """Target tables that exist, by name."""
    dead_letters: TableMeta
    batch_id: int
    writer: str
    #: How the tasks read the offset ranges the source emits (``emit=ranges``). Holds
    #: credentials: pickled to the executors, never logged.
    kafka: SourceOptions = field(repr=False)
    #: For plain JSON topics: topic -> table.
    json_tables: Mapping[str, str] = field(default_factory=dict)
    #: The driver's log level, applied in the Python workers (they do not inherit its config).
    log_level: str = "INFO"
    #: ``transactions: consistent``: which events go to the target tables, the rest is held.
    holding: Holding | None = None


@dataclass(frozen=True)
class Holding:
    """How a task splits its records in ``transactions: consistent`` mode."""

    held: TableMeta
    """The job's held table (:mod:`ingest.sink.held`): raw records of events not published."""
    publish: frozenset[str]
    """Transactions whose events go straight to the target tables (the driver expects them to
    be published by this batch's commit, or they were published before, incomplete)."""
    dissolve: tuple[DataFile, ...] = ()
    """The held table's files at the batch's base version. The task reading ``owner`` reads
    them whole and treats their events as its own first records: those of ``publish`` are
    written to the target tables, the rest is held again in its held file. The driver then
    reads nothing back unless its decision publishes more than ``publish``."""
    owner: tuple[str, int, int] | None = None
    """(topic, partition, offset): the task whose range holds this offset dissolves."""

    def owned_by(self, ranges: Iterable[OffsetRange]) -> bool:
        """Whether the task with these ranges dissolves the held files."""
        if self.owner is None or not self.dissolve:
            return False
        topic, partition, offset = self.owner
        return any(
            r.topic == topic and r.partition == partition and r.start <= offset < r.end
            for r in ranges
        )
