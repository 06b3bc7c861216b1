"""What an executor task tells the driver: file metadata, schemas, offsets and counts - never rows.

Each task returns one :class:`TaskReport` as a JSON string; the driver collects a handful of them
per micro-batch and builds the single catalog commit from them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping

from pydantic import BaseModel, ConfigDict, Field

from catalog import DataFile


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WrittenFile(_Model):
    table: str
    partition_desc: str
    file: DataFile


class NewTable(_Model):
    """A table the batch brings that the catalog does not have yet."""

    table: str
    kind: str  # "cdc" | "append"
    schema_b64: str
    primary_key: tuple[str, ...] = ()


class TableCounts(_Model):
    rows: int = 0
    upserts: int = 0
    deletes: int = 0
    #: Upserts that left columns out (unchanged TOASTed values), filled when merged.
    partial: int = 0

    def __add__(self, other: TableCounts) -> TableCounts:
        return TableCounts(
            rows=self.rows + other.rows,
            upserts=self.upserts + other.upserts,
            deletes=self.deletes + other.deletes,
            partial=self.partial + other.partial,
        )


class TopicFigures(_Model):
    """One topic's share of a batch, for the dead-letter guard (:mod:`ingest.sink.guard`)."""

    records: int = 0
    #: reason -> dead letters
    dead: dict[str, int] = Field(default_factory=dict)
    #: reason -> the error text of its first dead letter (it names the table and column)
    examples: dict[str, str] = Field(default_factory=dict)

    def __add__(self, other: TopicFigures) -> TopicFigures:
        dead = dict(self.dead)
        for reason, count in other.dead.items():
            dead[reason] = dead.get(reason, 0) + count
        return TopicFigures(
            records=self.records + other.records,
            dead=dead,
            examples={**other.examples, **self.examples},
        )

    @property
    def dead_letters(self) -> int:
        return sum(self.dead.values())


class TxnRanks(_Model):
    """Per transaction, the ranks (``total_order``) of the events a task read, as parallel
    columns: ids and masks (bit n for rank n, in hex; see :mod:`ingest.transactions.ranges`).

    Columns of plain strings, not ``{id: [(lo, hi)]}``: a batch reports tens of thousands of
    transactions, and pydantic reads lists of strings some 30 times faster than a mapping of
    lists of tuples; the driver unions a transaction's masks from several tasks with one ``|``.
    """

    ids: list[str] = Field(default_factory=list)
    masks: list[str] = Field(default_factory=list)
    #: Events whose ``transaction`` block could not be read (passed through as without one).
    malformed: int = 0

    @classmethod
    def of(cls, masks: Mapping[str, int], *, malformed: int = 0) -> TxnRanks:
        return cls(
            ids=list(masks), masks=[format(m, "x") for m in masks.values()], malformed=malformed
        )

    def items(self) -> Iterator[tuple[str, int]]:
        """(transaction id, mask) pairs."""
        return zip(self.ids, (int(m, 16) for m in self.masks), strict=True)

    def __len__(self) -> int:
        return len(self.ids)


class TaskReport(_Model):
    files: list[WrittenFile] = Field(default_factory=list)
    #: topic -> partition -> next offset (max offset seen + 1)
    offsets: dict[str, dict[str, int]] = Field(default_factory=dict)
    new_tables: list[NewTable] = Field(default_factory=list)
    #: table -> the wider schema (base64 Arrow IPC) its rows were written under
    evolved: dict[str, str] = Field(default_factory=dict)
    counts: dict[str, TableCounts] = Field(default_factory=dict)
    refused: list[tuple[str, str | None, str]] = Field(default_factory=list)
    dead_letters: int = 0
    ignored: int = 0
    tombstones: int = 0
    records: int = 0
    #: topic -> its records and dead letters in this task
    topics: dict[str, TopicFigures] = Field(default_factory=dict)
    max_timestamp_ms: int | None = None
    #: ``transactions: consistent``: per transaction id, the ranks (``total_order``) of the
    #: events the task read.
    txn_ranks: TxnRanks = Field(default_factory=TxnRanks)
    #: Records the task put into the held table instead of a target table.
    held: int = 0
    #: Held events of earlier batches this task read back (``Holding.dissolve``): published
    #: or held again.
    dissolved: int = 0
    #: The task's own CPU and wall time (read + decode + write), for the batch log.
    cpu_ms: int = 0
    wall_ms: int = 0


def merge_offsets(
    base: dict[str, dict[str, int]], *more: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    """Per topic-partition, the furthest next offset of all inputs."""
    merged: dict[str, dict[str, int]] = defaultdict(dict)
    for offsets in (base, *more):
        for topic, partitions in offsets.items():
            for partition, offset in partitions.items():
                merged[topic][partition] = max(offset, merged[topic].get(partition, 0))
    return {topic: dict(sorted(parts.items())) for topic, parts in sorted(merged.items())}


def total_counts(reports: Iterable[TaskReport]) -> dict[str, TableCounts]:
    totals: dict[str, TableCounts] = {}
    for report in reports:
        for table, c in report.counts.items():
            totals[table] = totals.get(table, TableCounts()) + c
    return totals


def topic_figures(reports: Iterable[TaskReport]) -> dict[str, TopicFigures]:
    """Per topic, the figures of all tasks of a batch added up."""
    totals: dict[str, TopicFigures] = {}
    for report in reports:
        for topic, figures in report.topics.items():
            totals[topic] = totals.get(topic, TopicFigures()) + figures
    return totals
